"""React to a commit within a second: watch a repository's refs, not poll them.

A commit or a fetch ends by renaming a ref file into place (or rewriting
`packed-refs`, or moving `HEAD`), so watching those paths with inotify
(watchfiles) sees every new head the moment it exists, where polling every
minute (Flux) or two (Argo CD) would not. Only the fact that something
moved is reported: the caller re-reads the head and reconciles toward the
newest commit, so a burst of commits is one call, and commits that arrive
while the caller is busy become one more call afterwards (level-triggered).

Notes refs are ignored: the daemon writes verdict notes itself, and its own
writes must not wake it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pygit2
import structlog
from watchfiles import Change, awatch

from reconciler.errors import InputError

log = structlog.get_logger(__name__)

IGNORED_REF_PREFIXES = ("refs/notes",)
"""refs/notes/* and the mirror's refs/notes-origin/* (see mirror.py)."""


def git_dir(path: Path) -> Path:
    """The git directory of a work tree, a bare repository, or a git directory itself."""
    found = pygit2.discover_repository(str(path))
    if found is None:
        raise InputError(f"not a git repository: {path}", file=str(path))
    return Path(found).resolve()


def _relevant(rel: str) -> bool:
    if rel.endswith(".lock"):
        return False  # the rename that follows is the change that counts
    if rel in {"HEAD", "packed-refs"}:
        return True
    return rel.startswith("refs/") and not rel.startswith(IGNORED_REF_PREFIXES)


def ref_filter(git_dirs: list[Path]) -> Callable[[Change, str], bool]:
    """A watchfiles filter keeping only ref changes under the given git directories."""
    roots = [str(d) + "/" for d in git_dirs]

    def keep(_change: Change, path: str) -> bool:
        for root in roots:
            if path.startswith(root):
                return _relevant(path[len(root) :])
        return False

    return keep


async def watch_refs(
    paths: list[Path],
    on_change: Callable[[], Awaitable[None]],
    *,
    stop: asyncio.Event,
    debounce_ms: int = 50,
) -> None:
    """Call `on_change` once per burst of ref changes in any of the repositories, until `stop` is set.

    `paths` are repositories (work trees, bare repos or mirrors). A failing
    `on_change` is logged and the watch goes on: the next change, or the
    daemon's interval fetch, tries again.
    """
    dirs = [git_dir(p) for p in paths]
    # step: how long a quiet gap ends a burst; debounce: the longest a steady stream of changes is held.
    step = max(1, debounce_ms)
    async for changes in awatch(
        *dirs,
        watch_filter=ref_filter(dirs),
        debounce=max(step * 20, 1000),
        step=step,
        stop_event=stop,
        rust_timeout=500,
    ):
        if stop.is_set():
            break
        log.debug("refs.changed", paths=sorted({p for _, p in changes})[:10], count=len(changes))
        try:
            await on_change()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("refs.on_change_failed", error=str(exc), error_type=type(exc).__name__)
