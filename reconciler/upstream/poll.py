"""Poll every declared source: the entry points for the daemon's scheduler and `lanes upstream --refresh`.

The daemon runs `poll_source` as one apscheduler job per source, every
`interval_s` of that source; `poll_all` polls them all at once with a bound
on concurrency (by hand, or on start). Both honour the stored rate-limit
deadline of each source, so a refresh by hand cannot spend a quota the
daemon has been told to leave alone. One failing source never stops another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import httpx
import structlog

from reconciler.spec.upstream import GitHead, GitHubReleases, OCIRepository, UpstreamsFile, UpstreamSource
from reconciler.upstream.base import USER_AGENT, Clock, PollResult, PollSettings, failed
from reconciler.upstream.bounded import BoundedTransport
from reconciler.upstream.githead import poll_git_head
from reconciler.upstream.github import poll_github
from reconciler.upstream.oci import poll_oci
from reconciler.upstream.store import UpstreamStore

log = structlog.get_logger(__name__)


def make_client(settings: PollSettings) -> httpx.AsyncClient:
    """One client for all HTTP sources; redirects followed (httpx drops Authorization across hosts)."""
    transport = BoundedTransport(httpx.AsyncHTTPTransport(), settings.max_answer_bytes)
    return httpx.AsyncClient(
        timeout=settings.timeout_s, follow_redirects=True, headers={"User-Agent": USER_AGENT}, transport=transport
    )


async def poll_source(
    source: UpstreamSource,
    store: UpstreamStore,
    settings: PollSettings,
    *,
    client: httpx.AsyncClient | None = None,
    clock: Clock | None = None,
) -> PollResult:
    """One poll of one source, whatever its kind."""
    if isinstance(source, GitHead):
        return await poll_git_head(source, store, settings, clock)
    if client is None:
        async with make_client(settings) as own:
            return await poll_source(source, store, settings, client=own, clock=clock)
    if isinstance(source, GitHubReleases):
        return await poll_github(source, store, client, settings, clock)
    assert isinstance(source, OCIRepository)
    return await poll_oci(source, store, client, settings, clock)


async def poll_all(
    upstreams: UpstreamsFile | Sequence[UpstreamSource],
    store: UpstreamStore,
    settings: PollSettings,
    *,
    client: httpx.AsyncClient | None = None,
    clock: Clock | None = None,
    on_result: Callable[[PollResult], None] | None = None,
) -> list[PollResult]:
    """Poll every source (at most `settings.concurrency` at a time); results in declaration order."""
    sources = list(upstreams.sources if isinstance(upstreams, UpstreamsFile) else upstreams)
    if client is None:
        async with make_client(settings) as own:
            return await poll_all(sources, store, settings, client=own, clock=clock, on_result=on_result)
    gate = asyncio.Semaphore(settings.concurrency)

    async def one(source: UpstreamSource) -> PollResult:
        async with gate:
            try:
                result = await poll_source(source, store, settings, client=client, clock=clock)
            except Exception as exc:
                result = _failed_unexpectedly(source, store, settings, clock, exc)
        if on_result is not None:
            on_result(result)
        return result

    return list(await asyncio.gather(*(one(s) for s in sources)))


def _failed_unexpectedly(
    source: UpstreamSource, store: UpstreamStore, settings: PollSettings, clock: Clock | None, exc: Exception
) -> PollResult:
    """A poller raised what it should have turned into a result: record it as this source's failure, backed off."""
    error = f"unexpected {type(exc).__name__}: {str(exc)[:200]}"
    log.error("upstream.poll_crashed", source=source.name, kind=source.kind, error=error)
    state = store.poll_state(source.name)
    return failed(source.name, source.kind, store, state, error, 0, settings, clock or Clock())
