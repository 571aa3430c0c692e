"""Poll an OCI repository for new tags (filtered, paged) and record each with its digest.

Nightly builds (eugr's `nightly-20261015`) and versioned images are
published as tags; a tag matters to lanes with the digest a pull resolves,
so each new matching tag is HEADed once (see `registry`). Known tags are not
asked for again, the tag list is paged with `n` and the `Link` header, and
Docker Hub's `ratelimit-remaining: 0;w=<window>` defers the source for the
window. Tags are HEADed newest first (by version or date, see `newest_first`)
with a cap per poll, so a first poll of a repository with thousands of tags
spends a bounded share of the quota on the newest of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import date

import httpx
import structlog
from packaging.version import Version

from reconciler.errors import PermanentError, TransientError
from reconciler.spec.saferegex import compile_pattern
from reconciler.spec.upstream import OCIRepository
from reconciler.upstream.base import Clock, PollResult, PollSettings, Requester, failed, mark_polled, rate_limited_until
from reconciler.upstream.bounded import answer_json
from reconciler.upstream.registry import RegistryClient, credential_for, manifest_digest, raise_for
from reconciler.upstream.store import PollState, ReleaseRecord, UpstreamStore
from reconciler.upstream.versions import date_in_tag, parse_tag, valid_tag

log = structlog.get_logger(__name__)


async def poll_oci(
    source: OCIRepository,
    store: UpstreamStore,
    client: httpx.AsyncClient,
    settings: PollSettings,
    clock: Clock | None = None,
) -> PollResult:
    """List the repository's tags (paged), keep those the filter matches, and record new ones with digests."""
    clock = clock or Clock()
    state = store.poll_state(source.name)
    if state.next_allowed is not None and state.next_allowed > clock.now():
        return PollResult(source.name, source.kind, "skipped", next_allowed=state.next_allowed)
    requester = Requester(client, settings, clock)
    try:
        credential = credential_for(settings, source.token_credential, source.registry, source.insecure)
        reg = RegistryClient(requester, source.registry, source.insecure, credential)
        result = await _poll(source, store, reg, settings, state, clock)
    except (TransientError, PermanentError) as exc:
        return failed(source.name, source.kind, store, state, str(exc), requester.count, settings, clock)
    log.info(
        "upstream.polled",
        source=source.name,
        kind=source.kind,
        status=result.status,
        new=len(result.new),
        requests=result.requests,
    )
    return result


async def _poll(
    source: OCIRepository,
    store: UpstreamStore,
    reg: RegistryClient,
    settings: PollSettings,
    state: PollState,
    clock: Clock,
) -> PollResult:
    what = f"{source.registry}/{source.repository}"
    url: str | httpx.URL = f"{reg.base}/v2/{source.repository}/tags/list?n={settings.page_size}"
    tags: list[str] = []
    etag: str | None = None
    for page in range(settings.max_pages):
        conditional = {"If-None-Match": state.etag} if page == 0 and state.etag else None
        response = await reg.request("GET", url, source.repository, "application/json", conditional)
        until = rate_limited_until(response, clock.now(), settings)
        if response.status_code == 304:
            mark_polled(store, state, clock.now(), until)
            return PollResult(source.name, source.kind, "unchanged", requests=reg.requester.count, next_allowed=until)
        if response.status_code == 429 or (until is not None and response.status_code != 200):
            return _limited(source, store, state, until or clock.now() + settings.secondary_wait_s, reg, clock)
        if response.status_code != 200:
            raise_for(response, what)
        if page == 0:
            etag = response.headers.get("etag")
        body = answer_json(response, f"{what}: tags")
        page_tags = body.get("tags") if isinstance(body, dict) else None
        for tag in page_tags or []:
            if valid_tag(tag):
                tags.append(tag)
            else:
                log.warning("upstream.tag_refused", source=source.name, tag=str(tag)[:200], why="not an OCI tag")
        next_url = response.links.get("next", {}).get("url")
        if until is not None:
            return _limited(source, store, state, until, reg, clock)
        if not next_url:
            break
        url = httpx.URL(str(response.url)).join(next_url)
    new = await _record_new(source, store, reg, settings, _matching(source, tags), clock)
    store.save_poll_state(PollState(source.name, etag, clock.now(), None, 0, None))
    return PollResult(source.name, source.kind, "new" if new else "unchanged", tuple(new), reg.requester.count)


def _matching(source: OCIRepository, tags: Sequence[str]) -> list[str]:
    pattern = compile_pattern(source.tag_filter) if source.tag_filter else None
    return newest_first(t for t in set(tags) if pattern is None or pattern.search(t))


def newest_first(tags: Iterable[str]) -> list[str]:
    """Tags newest first, so the cap on HEADs per poll drops the oldest, never the newest.

    As strings `v0.9.2` sorts above `v0.32.1`; what a tag says is compared instead: tags that parse as a
    version (`parse_tag`: `v0.32.1`, `v0.5.22-cu130`, NGC's `26.10-py3`) by PEP 440 version, newest
    first (variants of one version by name); then tags that only carry a date (`nightly-20261015`) by
    date, newest first; then every other tag (`latest`, `b12x-dev`) by name, so the order is total and
    the same on every poll. Versions and dates share no scale, so neither is interleaved with the other.
    """
    versioned: list[tuple[Version, str]] = []
    dated: list[tuple[date, str]] = []
    rest: list[str] = []
    for tag in tags:
        parsed = parse_tag(tag)
        day = date_in_tag(tag)
        if parsed is not None:
            versioned.append((parsed.version, tag))
        elif day is not None:
            dated.append((day, tag))
        else:
            rest.append(tag)
    # Newest first, and within one version (or day) by tag name ascending: sort by name, then stably by key.
    versioned = sorted(sorted(versioned, key=lambda v: v[1]), key=lambda v: v[0], reverse=True)
    dated = sorted(sorted(dated, key=lambda d: d[1]), key=lambda d: d[0], reverse=True)
    return [t for _, t in versioned] + [t for _, t in dated] + sorted(rest)


async def _record_new(
    source: OCIRepository,
    store: UpstreamStore,
    reg: RegistryClient,
    settings: PollSettings,
    tags: Sequence[str],
    clock: Clock,
) -> list[str]:
    known = store.known_tags(source.name)
    new: list[str] = []
    for tag in [t for t in tags if t not in known][: settings.max_digests_per_poll]:
        digest = await manifest_digest(reg, source.repository, tag)
        if digest is None:
            continue  # listed but gone by now
        parsed = parse_tag(tag)
        day = date_in_tag(tag)
        store.record_release(
            ReleaseRecord(
                source=source.name,
                tag=tag,
                version=str(parsed.version) if parsed else None,
                variant=parsed.variant if parsed else "",
                published=day.isoformat() if day else None,
                digest=digest,
                url=f"{source.registry}/{source.repository}:{tag}",
                prerelease=bool(parsed and parsed.prerelease),
                first_seen=clock.now(),
            )
        )
        new.append(tag)
    return new


def _limited(
    source: OCIRepository, store: UpstreamStore, state: PollState, until: float, reg: RegistryClient, clock: Clock
) -> PollResult:
    store.save_poll_state(replace(state, last_poll=clock.now(), next_allowed=until, last_error=None))
    log.warning("upstream.rate_limited", source=source.name, until=until)
    return PollResult(source.name, source.kind, "rate-limited", requests=reg.requester.count, next_allowed=until)
