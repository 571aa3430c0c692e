"""Git heads from real bare repositories made with pygit2: each new head with the subjects since the last."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from reconciler.spec.upstream import GitHead
from reconciler.upstream.base import PollSettings
from reconciler.upstream.githead import poll_git_head
from reconciler.upstream.mirrors import mirror_path
from reconciler.upstream.store import UpstreamStore
from tests.support.upstreamgit import commit
from tests.upstream.conftest import VirtualClock

pytestmark = pytest.mark.timeout(30)


def upstream_repo(tmp_path: Path) -> pygit2.Repository:
    return pygit2.init_repository(str(tmp_path / "flare.git"), bare=True, initial_head="main")


def flare(repo: pygit2.Repository, **extra: object) -> GitHead:
    return GitHead.model_validate({"kind": "git-head", "name": "flare-main", "url": repo.path, **extra})


async def test_each_new_head_is_recorded_with_the_subjects_since_the_last(
    tmp_path: Path, store: UpstreamStore, settings: PollSettings, vclock: VirtualClock
) -> None:
    up = upstream_repo(tmp_path)
    first = [commit(up, s, 1_792_000_000 + i) for i, s in enumerate(["Initial runtime", "Prepared CUDA graphs"])]
    result = await poll_git_head(flare(up), store, settings, vclock.clock())
    assert result.status == "new" and result.new == (first[-1][:12],)
    head = store.last_head("flare-main")
    assert head is not None and head.sha == first[-1] and head.branch == "main"
    assert [s for _, s in head.commits] == ["Prepared CUDA graphs", "Initial runtime"]
    assert (mirror_path(settings.data_dir, "flare-main") / "HEAD").exists()

    again = await poll_git_head(flare(up), store, settings, vclock.clock())
    assert again.status == "unchanged" and len(store.heads("flare-main")) == 1

    batch = [
        "Preset DeepSeek V4.1 packed GPU speculation",
        "adaptive verification scoring alpha",
        "resume preparation checkpoints",
        "Serve and prepare over hosts cabled as a chain",
    ]
    shas = [commit(up, s, 1_792_100_000 + i) for i, s in enumerate(batch)]
    vclock.advance(1800)
    moved = await poll_git_head(flare(up), store, settings, vclock.clock())
    assert moved.status == "new"
    heads = store.heads("flare-main")
    assert [h.sha for h in heads] == [first[-1], shas[-1]]
    assert [s for _, s in heads[-1].commits] == list(reversed(batch))  # newest first, none from before
    assert [sha for sha, _ in heads[-1].commits] == list(reversed(shas))
    assert heads[-1].committed == 1_792_100_003.0


async def test_a_branch_other_than_main_is_fetched_alone(
    tmp_path: Path, store: UpstreamStore, settings: PollSettings, vclock: VirtualClock
) -> None:
    up = upstream_repo(tmp_path)
    commit(up, "on main", 1_792_000_000)
    tip = commit(up, "on release", 1_792_000_100, branch="release")
    result = await poll_git_head(flare(up, branch="release"), store, settings, vclock.clock())
    assert result.status == "new"
    mirror = pygit2.Repository(str(mirror_path(settings.data_dir, "flare-main")))
    assert str(mirror.references["refs/heads/release"].target) == tip
    assert "refs/heads/main" not in list(mirror.references)


async def test_a_missing_branch_or_repository_is_a_failed_poll_with_backoff(
    tmp_path: Path, store: UpstreamStore, settings: PollSettings, vclock: VirtualClock
) -> None:
    up = upstream_repo(tmp_path)
    commit(up, "on main", 1_792_000_000)
    result = await poll_git_head(flare(up, branch="nope"), store, settings, vclock.clock())
    assert result.status == "failed"
    assert store.poll_state("flare-main").failures == 1
    gone = GitHead(kind="git-head", name="gone", url=str(tmp_path / "missing.git"))
    failed = await poll_git_head(gone, store, settings, vclock.clock())
    assert failed.status == "failed" and "fetch" in (failed.error or "")
