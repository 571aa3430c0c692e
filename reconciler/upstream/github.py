"""Poll GitHub releases (vLLM, SGLang) without wasting the API quota.

An unchanged source must cost nothing: the first page is asked for with
`If-None-Match` and the stored ETag, and GitHub answers 304 without counting
it against the rate limit. Releases come newest first, so paging stops at the
first page that holds a release already recorded. The quota headers are read
on every answer; when they say stop, the deadline goes to the store and the
source is skipped until then, across restarts. Drafts are not releases and
are skipped; pre-releases are recorded, flagged, and kept out of the gap.
The token is sent as a header and nowhere else: not in URLs, logs or sqlite;
and only to a host the daemon's settings declare for it, over https
(`credential_for`): a `Link` to another host gets no token.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import httpx
import structlog

from reconciler.errors import PermanentError, TransientError
from reconciler.spec.saferegex import SafePattern, compile_pattern
from reconciler.spec.upstream import GitHubReleases
from reconciler.upstream.base import (
    Clock,
    Credential,
    PollResult,
    PollSettings,
    PollStatus,
    Requester,
    credential_for,
    failed,
    mark_polled,
    rate_limited_until,
)
from reconciler.upstream.bounded import answer_json
from reconciler.upstream.store import PollState, ReleaseRecord, UpstreamStore
from reconciler.upstream.versions import parse_tag, valid_tag

log = structlog.get_logger(__name__)

API_VERSION = "2022-11-28"


async def poll_github(
    source: GitHubReleases,
    store: UpstreamStore,
    client: httpx.AsyncClient,
    settings: PollSettings,
    clock: Clock | None = None,
) -> PollResult:
    """One poll of one repository's releases; never raises for upstream trouble (the result says)."""
    clock = clock or Clock()
    now = clock.now()
    state = store.poll_state(source.name)
    if state.next_allowed is not None and state.next_allowed > now:
        return PollResult(source.name, source.kind, "skipped", next_allowed=state.next_allowed)
    requester = Requester(client, settings, clock)
    try:
        token = credential_for(settings, source.token_credential, _first_url(source, settings))
        result = await _poll(source, store, requester, settings, state, token, clock)
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


def _first_url(source: GitHubReleases, settings: PollSettings) -> str:
    return f"{source.api_url.rstrip('/')}/repos/{source.repo}/releases?per_page={settings.page_size}"


def _headers(token: Credential | None, url: str | httpx.URL) -> dict[str, str]:
    headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": API_VERSION}
    if token is not None and token.allows(url):
        headers["Authorization"] = f"Bearer {token.value}"
    return headers


async def _poll(
    source: GitHubReleases,
    store: UpstreamStore,
    requester: Requester,
    settings: PollSettings,
    state: PollState,
    token: Credential | None,
    clock: Clock,
) -> PollResult:
    known = store.known_tags(source.name)
    tag_filter = compile_pattern(source.tag_filter) if source.tag_filter else None
    url: str | httpx.URL = _first_url(source, settings)
    new: list[str] = []
    etag: str | None = None
    complete = True
    until: float | None = None
    for page in range(settings.max_pages):
        headers = _headers(token, url)
        if page == 0 and state.etag:
            headers["If-None-Match"] = state.etag
        response = await requester.send("GET", url, headers)
        until = rate_limited_until(response, clock.now(), settings)
        if response.status_code == 304:
            mark_polled(store, state, clock.now(), until)
            return PollResult(source.name, source.kind, "unchanged", requests=requester.count, next_allowed=until)
        if response.status_code in (403, 429, 503) and until is not None:
            store.save_poll_state(replace(state, last_poll=clock.now(), next_allowed=until, last_error=None))
            log.warning("upstream.rate_limited", source=source.name, until=until, status=response.status_code)
            return PollResult(source.name, source.kind, "rate-limited", tuple(new), requester.count, until)
        _check(response, source)
        if page == 0:
            etag = response.headers.get("etag")
        items = answer_json(response, f"{source.repo}: releases")
        if not isinstance(items, list):
            raise TransientError(f"{source.repo}: releases answer is not a list")
        seen_known = False
        for item in items:
            tag = _record(source, store, item, tag_filter, clock)
            if tag is None:
                continue
            if tag in known:
                seen_known = True
            else:
                new.append(tag)
        next_url = response.links.get("next", {}).get("url")
        if until is not None and next_url:
            complete = False  # out of quota mid-way: the rest waits for the reset
            break
        if not next_url or seen_known:
            break
        url = httpx.URL(str(response.url)).join(next_url)
    store.save_poll_state(
        PollState(
            source=source.name,
            etag=etag if complete else None,
            last_poll=clock.now(),
            next_allowed=until,
            failures=0,
            last_error=None,
        )
    )
    status: PollStatus = "new" if new else ("rate-limited" if until is not None else "unchanged")
    return PollResult(source.name, source.kind, status, tuple(new), requester.count, until)


def _check(response: httpx.Response, source: GitHubReleases) -> None:
    code = response.status_code
    if code == 200:
        return
    if code in (401, 403):
        raise PermanentError(f"{source.repo}: GitHub refused the request (HTTP {code}); check the token's access")
    if code == 404:
        raise PermanentError(f"{source.repo}: no such repository (HTTP 404) at {source.api_url}")
    raise TransientError(f"{source.repo}: unexpected answer HTTP {code}")


def _record(
    source: GitHubReleases,
    store: UpstreamStore,
    item: Any,
    tag_filter: SafePattern | None,
    clock: Clock,
) -> str | None:
    """Store one release of the listing; the tag, or None for drafts and filtered tags."""
    if not isinstance(item, dict) or item.get("draft"):
        return None
    tag = item.get("tag_name")
    if not isinstance(tag, str) or not tag or (tag_filter is not None and not tag_filter.search(tag)):
        return None
    if not valid_tag(tag):
        log.warning("upstream.tag_refused", source=source.name, tag=tag[:200], why="not in the OCI tag grammar")
        return None
    parsed = parse_tag(tag)
    html_url = item.get("html_url") if isinstance(item.get("html_url"), str) else None
    store.record_release(
        ReleaseRecord(
            source=source.name,
            tag=tag,
            version=str(parsed.version) if parsed else None,
            variant=parsed.variant if parsed else "",
            published=item.get("published_at") or item.get("created_at"),
            url=html_url,
            notes_url=html_url,
            prerelease=bool(item.get("prerelease")) or bool(parsed and parsed.prerelease),
            first_seen=clock.now(),
        )
    )
    return tag
