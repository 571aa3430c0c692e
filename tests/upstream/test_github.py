"""The GitHub releases poller against a local server that answers as api.github.com does."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import structlog

from reconciler.spec.upstream import GitHubReleases
from reconciler.upstream.base import PollSettings
from reconciler.upstream.github import poll_github
from reconciler.upstream.store import UpstreamStore
from tests.upstream.conftest import NOW, VirtualClock
from tests.upstream.servers import App, FakeGitHub, LocalServer, Reply
from tests.upstream.tokens import with_token

pytestmark = pytest.mark.timeout(30)

REPO = "vllm-project/vllm"


def vllm_github() -> FakeGitHub:
    gh = FakeGitHub((REPO,))
    for minor, day in zip(range(27, 33), ("06-20", "07-10", "07-30", "08-20", "09-15", "10-18"), strict=True):
        gh.add(REPO, f"v0.{minor}.0", f"2026-{day}T17:00:00Z")
    return gh


def source(server: LocalServer, **extra: object) -> GitHubReleases:
    return GitHubReleases.model_validate(
        {"kind": "github-releases", "name": "vllm-releases", "repo": REPO, "api_url": server.url, **extra}
    )


async def test_first_poll_walks_every_page_by_link_and_records_each_release(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    gh = vllm_github()
    server = serve(gh)
    result = await poll_github(source(server), store, client, settings, vclock.clock())
    assert result.status == "new"
    assert set(result.new) == {f"v0.{m}.0" for m in range(27, 33)}
    pages = [r.query.get("page", "1") for r in server.requests]
    assert pages == ["1", "2", "3"]  # page_size 2: three pages, followed through Link rel="next"
    assert all(r.query["per_page"] == "2" for r in server.requests)
    assert all(r.headers["accept"] == "application/vnd.github+json" for r in server.requests)
    latest = store.release("vllm-releases", "v0.32.0")
    assert latest is not None
    assert (latest.version, latest.published, latest.prerelease) == ("0.32.0", "2026-10-18T17:00:00Z", False)
    assert latest.notes_url == "https://github.com/vllm-project/vllm/releases/tag/v0.32.0"
    assert latest.first_seen == NOW
    state = store.poll_state("vllm-releases")
    assert state.etag and state.failures == 0 and state.next_allowed is None


async def test_an_unchanged_poll_makes_only_conditional_requests(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    gh = vllm_github()
    server = serve(gh)
    await poll_github(source(server), store, client, settings, vclock.clock())
    etag = store.poll_state("vllm-releases").etag
    quota = gh.remaining
    before = len(server.requests)
    vclock.advance(3600)
    result = await poll_github(source(server), store, client, settings, vclock.clock())
    second = server.requests[before:]
    assert result.status == "unchanged" and result.requests == 1
    assert len(second) == 1, [r.target for r in second]
    assert second[0].headers["if-none-match"] == etag
    assert gh.remaining == quota  # the 304 cost nothing
    assert store.poll_state("vllm-releases").last_poll == NOW + 3600


async def test_a_new_release_is_found_on_the_first_page_and_paging_stops_at_known_releases(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    gh = vllm_github()
    server = serve(gh)
    await poll_github(source(server), store, client, settings, vclock.clock())
    gh.add(REPO, "v0.32.1", "2026-10-25T10:00:00Z")
    before = len(server.requests)
    result = await poll_github(source(server), store, client, settings, vclock.clock())
    assert result.status == "new" and result.new == ("v0.32.1",)
    assert [r.query.get("page", "1") for r in server.requests[before:]] == ["1"]


async def test_drafts_are_skipped_and_prereleases_flagged(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    gh = FakeGitHub(("sgl-project/sglang",))
    gh.add("sgl-project/sglang", "v0.5.22", "2026-10-19T08:00:00Z")
    gh.add("sgl-project/sglang", "v0.6.0rc1", "2026-10-21T08:00:00Z", prerelease=True)
    gh.add("sgl-project/sglang", "v0.5.23", "2026-10-22T08:00:00Z", draft=True)
    gh.add("sgl-project/sglang", "v0.5.5.post3", "2026-08-01T08:00:00Z")
    server = serve(gh)
    src = GitHubReleases(kind="github-releases", name="sglang-releases", repo="sgl-project/sglang", api_url=server.url)
    await poll_github(src, store, client, settings, vclock.clock())
    tags = {r.tag: r for r in store.releases("sglang-releases")}
    assert set(tags) == {"v0.5.22", "v0.6.0rc1", "v0.5.5.post3"}
    assert tags["v0.6.0rc1"].prerelease and not tags["v0.5.22"].prerelease
    assert tags["v0.5.5.post3"].version == "0.5.5.post3"


async def test_a_tag_filter_keeps_only_matching_tags(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    server = serve(vllm_github())
    await poll_github(source(server, tag_filter=r"^v0\.3[12]\."), store, client, settings, vclock.clock())
    assert {r.tag for r in store.releases("vllm-releases")} == {"v0.31.0", "v0.32.0"}


@pytest.mark.parametrize("status", [403, 429])
async def test_exhausted_quota_defers_the_source_until_the_reset_and_no_request_is_sent_before(
    status: int,
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    gh = vllm_github()
    reset = int(NOW) + 900
    gh.queued.append(
        Reply.json(
            status,
            {"message": "API rate limit exceeded"},
            {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)},
        )
    )
    server = serve(gh)
    result = await poll_github(source(server), store, client, settings, vclock.clock())
    assert result.status == "rate-limited" and result.next_allowed == reset
    assert store.poll_state("vllm-releases").next_allowed == reset
    vclock.advance(600)
    count = len(server.requests)
    skipped = await poll_github(source(server), store, client, settings, vclock.clock())
    assert skipped.status == "skipped" and skipped.requests == 0 and len(server.requests) == count
    vclock.advance(301)
    after = await poll_github(source(server), store, client, settings, vclock.clock())
    assert after.status == "new" and len(after.new) == 6


async def test_retry_after_of_a_secondary_limit_is_honoured(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    gh = vllm_github()
    gh.queued.append(Reply.json(403, {"message": "secondary rate limit"}, {"retry-after": "120"}))
    server = serve(gh)
    result = await poll_github(source(server), store, client, settings, vclock.clock())
    assert result.status == "rate-limited" and result.next_allowed == NOW + 120


async def test_a_response_that_spends_the_last_request_stores_the_reset(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    gh = vllm_github()
    gh.remaining = 2  # page 1 leaves 1, page 2 leaves 0: page 3 must wait for the reset
    gh.reset = int(NOW) + 1800
    server = serve(gh)
    result = await poll_github(source(server), store, client, settings, vclock.clock())
    assert len(server.requests) == 2
    assert result.next_allowed == NOW + 1800
    state = store.poll_state("vllm-releases")
    assert state.next_allowed == NOW + 1800 and state.etag is None  # incomplete: the next poll starts over


async def test_server_errors_are_retried_with_jittered_exponential_backoff(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    gh = vllm_github()
    gh.queued += [Reply(502), Reply(503)]
    server = serve(gh)
    result = await poll_github(source(server), store, client, settings, vclock.clock())
    assert result.status == "new" and result.requests == 5  # 2 failures, then 3 pages
    assert len(vclock.slept) == 2
    assert 0 <= vclock.slept[0] <= 2 and 0 <= vclock.slept[1] <= 4  # full jitter under base * 2^attempt
    assert len(server.requests) == 5


async def test_a_poll_that_keeps_failing_backs_off_and_counts_failures(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    gh = vllm_github()
    gh.queued += [Reply(500)] * 6
    server = serve(gh)
    first = await poll_github(source(server), store, client, settings, vclock.clock())
    assert first.status == "failed" and "HTTP 500" in (first.error or "")
    state = store.poll_state("vllm-releases")
    assert state.failures == 1 and state.next_allowed is not None and state.next_allowed <= vclock.t + 120
    assert (await poll_github(source(server), store, client, settings, vclock.clock())).status == "skipped"
    vclock.t = state.next_allowed + 1
    second = await poll_github(source(server), store, client, settings, vclock.clock())
    assert second.status == "failed" and store.poll_state("vllm-releases").failures == 2


async def test_network_errors_are_a_failed_poll_not_an_exception(
    store: UpstreamStore, settings: PollSettings, client: httpx.AsyncClient, vclock: VirtualClock
) -> None:
    src = GitHubReleases(kind="github-releases", name="vllm-releases", repo=REPO, api_url="http://127.0.0.1:9")
    result = await poll_github(src, store, client, settings, vclock.clock())
    assert result.status == "failed" and "ConnectError" in (result.error or "")
    assert result.requests == settings.attempts


async def test_the_token_is_sent_as_a_header_and_never_logged_or_stored(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    token = "ghp_Zq8sEcReTtOkEn0123456789abcdef"
    settings = with_token(settings, "github-token", token)
    gh = vllm_github()
    gh.token = token
    server = serve(gh)
    src = source(server, token_credential="github-token")
    caplog.set_level(logging.DEBUG)
    with structlog.testing.capture_logs() as events:
        assert (await poll_github(src, store, client, settings, vclock.clock())).status == "new"
        gh.token = "another-token-the-poller-does-not-have"
        vclock.advance(3600)
        refused = await poll_github(src, store, client, settings, vclock.clock())
    assert refused.status == "failed" and "401" in (refused.error or "")
    assert all(r.headers["authorization"] == f"Bearer {token}" for r in server.requests)
    assert all(token not in r.target for r in server.requests)
    assert events and token not in repr(events)
    assert token not in caplog.text
    store.db.conn.execute("PRAGMA wal_checkpoint(FULL)")
    for name in ("lanes.db", "lanes.db-wal", "lanes.db-shm"):
        data = (tmp_path / name).read_bytes() if (tmp_path / name).exists() else b""
        assert token.encode() not in data, name
    assert token not in repr(store.poll_state("vllm-releases"))


async def test_an_unreadable_credential_fails_the_poll_without_a_request(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    server = serve(vllm_github())
    result = await poll_github(source(server, token_credential="missing"), store, client, settings, vclock.clock())
    assert result.status == "failed" and "credential 'missing'" in (result.error or "")
    assert server.requests == []
