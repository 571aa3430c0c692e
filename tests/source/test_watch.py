"""The local watch: a commit wakes the daemon; bursts are one call; notes and other files do not."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pygit2
import pytest

from reconciler.source.mirror import Mirror
from reconciler.source.notes import write_verdict_note
from reconciler.source.watch import RefWatch, git_dir, is_ref_change, watch_refs
from tests.source.gitutil import commit, forge_and_clone, git, push

pytestmark = pytest.mark.timeout(30)

SETTLE_S = 0.3
"""Time for inotify watches to be in place before the test changes anything."""


class Calls:
    def __init__(self) -> None:
        self.times: list[float] = []
        self.event = asyncio.Event()

    async def __call__(self) -> None:
        self.times.append(time.monotonic())
        self.event.set()

    async def next(self, timeout: float = 5.0) -> float:
        await asyncio.wait_for(self.event.wait(), timeout)
        self.event.clear()
        return self.times[-1]


@asynccontextmanager
async def watching(paths: list[Path], on_change: Callable[[], object]) -> AsyncIterator[asyncio.Event]:
    stop = asyncio.Event()
    task = asyncio.create_task(watch_refs(paths, on_change, stop=stop))  # type: ignore[arg-type]
    await asyncio.sleep(SETTLE_S)
    try:
        yield stop
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def test_a_commit_triggers_on_change(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "state"), bare=False, initial_head="main")
    commit(repo, {"state/lanes/a.yaml": b"image: one\n"}, "first")
    calls = Calls()
    async with watching([tmp_path / "state"], calls):
        started = time.monotonic()
        commit(repo, {"state/lanes/a.yaml": b"image: two\n"}, "second")
        seen = await calls.next()
    # Nothing but the watch calls on_change here; how soon it does is a figure, printed, not asserted.
    print(f"\nwatch latency: commit -> on_change {(seen - started) * 1000:.0f} ms")


async def test_a_git_cli_commit_in_a_work_tree_triggers_on_change(tmp_path: Path) -> None:
    work = tmp_path / "state"
    git("init", "--quiet", "--initial-branch=main", str(work))
    (work / "a.yaml").write_text("image: one\n")
    git("add", "a.yaml", cwd=work)
    git("commit", "--quiet", "-m", "first", cwd=work)
    calls = Calls()
    async with watching([work], calls):
        (work / "a.yaml").write_text("image: two\n")
        git("add", "a.yaml", cwd=work)
        await asyncio.sleep(0.3)
        assert calls.times == []  # staging is not a commit
        started = time.monotonic()
        git("commit", "--quiet", "-m", "second", cwd=work)
        seen = await calls.next()
    print(f"\nwatch latency: git commit -> on_change {(seen - started) * 1000:.0f} ms")


async def test_a_burst_of_ten_commits_is_one_call(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "state"), bare=True, initial_head="main")
    commit(repo, {"f": b"0"}, "first")
    calls = Calls()
    async with watching([tmp_path / "state"], calls):
        for i in range(10):
            commit(repo, {"f": str(i + 1).encode()}, f"commit {i + 1}")
        await calls.next()
        await asyncio.sleep(0.5)
    assert len(calls.times) == 1


async def test_changes_during_a_slow_on_change_become_one_more_call(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "state"), bare=True, initial_head="main")
    commit(repo, {"f": b"0"}, "first")
    times: list[float] = []
    busy = asyncio.Event()

    async def slow() -> None:
        times.append(time.monotonic())
        busy.set()
        await asyncio.sleep(0.4)

    async with watching([tmp_path / "state"], slow):
        commit(repo, {"f": b"1"}, "one")
        await asyncio.wait_for(busy.wait(), 5)
        for i in range(5):  # while the first reconcile is still running
            commit(repo, {"f": str(i + 2).encode()}, "more")
            await asyncio.sleep(0.02)
        await asyncio.sleep(1.2)
    assert len(times) == 2


async def test_notes_and_lock_files_do_not_wake_it(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "state"), bare=True, initial_head="main")
    sha = commit(repo, {"f": b"0"}, "first")
    calls = Calls()
    async with watching([tmp_path / "state"], calls):
        write_verdict_note(repo, sha, {"summary": "applied"})
        (tmp_path / "state" / "refs" / "heads" / "x.lock").write_text("")
        (tmp_path / "state" / "objects" / "stray").write_text("")
        await asyncio.sleep(0.5)
    assert calls.times == []


async def test_a_fetch_into_the_mirror_wakes_it(tmp_path: Path) -> None:
    forge, work = forge_and_clone(tmp_path)
    mirror = Mirror(forge.path, tmp_path / "mirror.git")
    mirror.fetch()
    calls = Calls()
    async with watching([mirror.path], calls):
        commit(work, {"state/lanes/a.yaml": b"image: two\n"}, "second")
        push(work)
        await asyncio.sleep(0.2)
        assert calls.times == []  # the forge moved, the mirror has not fetched yet
        mirror.fetch()
        await calls.next()


async def test_a_failing_on_change_does_not_end_the_watch(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "state"), bare=True, initial_head="main")
    commit(repo, {"f": b"0"}, "first")
    attempts: list[int] = []
    second = asyncio.Event()

    async def flaky() -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("remote down")
        second.set()

    async with watching([tmp_path / "state"], flaky):
        commit(repo, {"f": b"1"}, "one")
        await asyncio.sleep(0.4)
        commit(repo, {"f": b"2"}, "two")
        await asyncio.wait_for(second.wait(), 5)
    assert len(attempts) == 2


async def test_the_stop_event_ends_the_watch(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "state"), bare=True, initial_head="main")
    commit(repo, {"f": b"0"}, "first")
    stop = asyncio.Event()
    task = asyncio.create_task(watch_refs([tmp_path / "state"], Calls(), stop=stop))
    await asyncio.sleep(SETTLE_S)
    stop.set()
    await asyncio.wait_for(task, 5)  # no change comes: only the stop event can end it


def test_only_refs_head_and_packed_refs_count(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r"), bare=False)
    assert git_dir(tmp_path / "r") == Path(repo.path).resolve()
    for rel in ("refs/heads/main", "refs/remotes/origin/main", "refs/tags/v1", "packed-refs", "HEAD"):
        assert is_ref_change(rel), rel
    for rel in ("refs/heads/main.lock", "refs/notes/lanes", "refs/notes-origin/lanes", "objects/ab/cdef"):
        assert not is_ref_change(rel), rel
    assert not is_ref_change("FETCH_HEAD") and not is_ref_change("index") and not is_ref_change("logs/HEAD")


async def test_a_branch_in_a_new_folder_and_a_deleted_branch_wake_it(tmp_path: Path) -> None:
    """A ref renamed into a folder that did not exist a moment before is seen, and so is a removal."""
    repo = pygit2.init_repository(str(tmp_path / "state"), bare=True, initial_head="main")
    sha = commit(repo, {"f": b"0"}, "first")
    calls = Calls()
    async with watching([tmp_path / "state"], calls):
        repo.references.create("refs/heads/team/deep/feature", sha)
        await calls.next()
        repo.references.delete("refs/heads/team/deep/feature")
        await calls.next()
        # The new folders are watched too: a ref moved in one of them is a change.
        repo.references.create("refs/heads/team/other", sha)
        await calls.next()


async def test_notes_folders_are_not_watched_and_nothing_runs_while_idle(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "state"), bare=True, initial_head="main")
    sha = commit(repo, {"f": b"0"}, "first")
    write_verdict_note(repo, sha, {"summary": "applied"})
    with RefWatch([git_dir(tmp_path / "state")]) as watch:
        folders = sorted(rel for _, rel in watch._folders.values())
        assert folders == ["", "refs", "refs/heads", "refs/tags"]
        assert not watch.read()  # no event yet, and reading does not block
        write_verdict_note(repo, sha, {"summary": "applied again"})
        (tmp_path / "state" / "FETCH_HEAD").write_text("x")
        assert not watch.read()
        commit(repo, {"f": b"1"}, "second")
        assert watch.read()
