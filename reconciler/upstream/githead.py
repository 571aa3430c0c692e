"""Watch the head of a git branch (FLARE, vLLM main) through a bare mirror read with pygit2.

Some engines are run from a branch, not from releases, and FLARE moves
several commits a day: the useful record is each new head with the subjects
of the commits that came with it ("Preset DeepSeek V4.1 packed GPU
speculation", ...), so a person reading `lanes upstream` or a proposal sees
what changed without opening the forge. Only the watched branch is fetched,
into a bare mirror under the data dir, so a poll costs one fetch of the new
objects. The first poll has no previous head; it records the head with up to
`max_subjects` commits of history, so a lane's build commit can be found.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path

import pygit2
import structlog
from pygit2.enums import SortMode

from reconciler.errors import PermanentError, TransientError
from reconciler.spec.upstream import GitHead
from reconciler.upstream.base import Clock, PollResult, PollSettings, failed
from reconciler.upstream.mirrors import mirror_path
from reconciler.upstream.store import HeadRecord, PollState, UpstreamStore

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class FetchedHead:
    sha: str
    committed: float
    commits: tuple[tuple[str, str], ...]
    """(sha, subject), newest first, since the previous head (exclusive)."""


def open_mirror(path: Path) -> pygit2.Repository:
    if (path / "HEAD").exists():
        return pygit2.Repository(str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    return pygit2.init_repository(str(path), bare=True)


def fetch_head(mirror: Path, url: str, branch: str, previous: str | None, max_commits: int) -> FetchedHead:
    """Fetch one branch into the mirror and list the commits since `previous` (blocking: run in a thread)."""
    ref = f"refs/heads/{branch}"
    if not pygit2.reference_is_valid_name(ref):
        raise PermanentError(f"'{branch}' is not a valid branch name")
    repo = open_mirror(mirror)
    remote = repo.remotes.create_anonymous(url)
    try:
        remote.fetch([f"+{ref}:{ref}"])
    except pygit2.GitError as exc:
        raise TransientError(f"fetch of {branch} from {url} failed: {exc}") from None
    try:
        head = repo.references[ref].peel(pygit2.Commit)
    except (KeyError, ValueError):
        raise PermanentError(f"{url} has no branch '{branch}'") from None
    walker = repo.walk(head.id, SortMode.TOPOLOGICAL | SortMode.TIME)
    if previous is not None:
        # History rewritten upstream: the previous head is gone; list what is there instead.
        with contextlib.suppress(KeyError, ValueError, pygit2.GitError):
            walker.hide(pygit2.Oid(hex=previous))
    commits: list[tuple[str, str]] = []
    for commit in walker:
        if len(commits) >= max_commits:
            break
        subject = commit.message.strip().splitlines()[0] if commit.message.strip() else ""
        commits.append((str(commit.id), subject))
    return FetchedHead(str(head.id), float(head.commit_time), tuple(commits))


async def poll_git_head(
    source: GitHead,
    store: UpstreamStore,
    settings: PollSettings,
    clock: Clock | None = None,
) -> PollResult:
    """Fetch the branch; a moved head is recorded with the subjects since the last recorded head."""
    clock = clock or Clock()
    state = store.poll_state(source.name)
    if state.next_allowed is not None and state.next_allowed > clock.now():
        return PollResult(source.name, source.kind, "skipped", next_allowed=state.next_allowed)
    last = store.last_head(source.name)
    previous = last.sha if last else None
    mirror = mirror_path(settings.data_dir, source.name)
    try:
        fetched = await asyncio.to_thread(
            fetch_head, mirror, source.url, source.branch, previous, settings.max_subjects
        )
    except (TransientError, PermanentError) as exc:
        return failed(source.name, source.kind, store, state, str(exc), 1, settings, clock)
    now = clock.now()
    store.save_poll_state(PollState(source.name, None, now, None, 0, None))
    if fetched.sha == previous:
        return PollResult(source.name, source.kind, "unchanged", requests=1)
    store.record_head(HeadRecord(source.name, source.branch, fetched.sha, fetched.committed, fetched.commits, now))
    log.info(
        "upstream.head", source=source.name, branch=source.branch, sha=fetched.sha[:12], commits=len(fetched.commits)
    )
    return PollResult(source.name, source.kind, "new", (fetched.sha[:12],), requests=1)
