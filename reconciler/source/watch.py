"""React to a commit within a second: watch a repository's refs, not poll them.

A commit or a fetch ends by renaming a ref file into place (or rewriting
`packed-refs`, or moving `HEAD`), so watching those paths with inotify sees
every new head the moment it exists, where polling every minute (Flux) or two
(Argo CD) would not. Only the fact that something moved is reported: the
caller re-reads the head and reconciles toward the newest commit, so a burst
of commits is one call, and commits that arrive while the caller is busy
become one more call afterwards (level-triggered).

The kernel does the watching: the git directory itself (for `HEAD`,
`packed-refs` and a `refs` folder that appears) and every folder under
`refs/` are watched with inotify, and the event loop reads the inotify file
descriptor when it becomes readable. An idle daemon is woken by nothing here.
(watchfiles, used before, polled its queue every 50 ms on a thread of its own
and handed back to the loop every 500 ms: 27 wake-ups a second, 0.13 % of a
core on the bench's idle daemon, and it watched every folder of the git
directory, objects included.) Linux only, like the daemon.

Notes refs are ignored (not even watched): the daemon writes verdict notes
itself, and its own writes must not wake it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import os
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path

import pygit2
import structlog

from reconciler.errors import InputError, PermanentError

log = structlog.get_logger(__name__)

IGNORED_REF_PREFIXES = ("refs/notes",)
"""refs/notes/* and the mirror's refs/notes-origin/* (see mirror.py)."""

# <sys/inotify.h>
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
WATCHED = IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_ONLYDIR
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of NUL-padded name


def git_dir(path: Path) -> Path:
    """The git directory of a work tree, a bare repository, or a git directory itself."""
    found = pygit2.discover_repository(str(path))
    if found is None:
        raise InputError(f"not a git repository: {path}", file=str(path))
    return Path(found).resolve()


def is_ref_change(rel: str) -> bool:
    """Whether a change to `rel` (a path relative to a git directory) can move a head."""
    if rel.endswith(".lock"):
        return False  # the rename that follows is the change that counts
    if rel in {"HEAD", "packed-refs"}:
        return True
    return rel.startswith("refs/") and not rel.startswith(IGNORED_REF_PREFIXES)


def _watched_folder(rel: str) -> bool:
    return (rel == "refs" or rel.startswith("refs/")) and not rel.startswith(IGNORED_REF_PREFIXES)


class RefWatch:
    """An inotify instance on git directories and their `refs/` trees; `fd` becomes readable on an event."""

    def __init__(self, git_dirs: list[Path]) -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            self._add = libc.inotify_add_watch
            init = libc.inotify_init1
        except (OSError, AttributeError) as exc:
            raise PermanentError(f"the local watch of the refs needs Linux inotify: {exc}") from None
        self._add.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        fd = init(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise PermanentError(f"inotify_init1: {os.strerror(ctypes.get_errno())}")
        self.fd: int = fd
        self._folders: dict[int, tuple[Path, str]] = {}  # watch descriptor -> (git dir, folder relative to it)
        try:
            for root in dict.fromkeys(git_dirs):  # one watch per folder, whichever path named it
                self._watch(root, "")
                self._watch_tree(root, "refs")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> RefWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _watch(self, root: Path, rel: str) -> bool:
        path = root / rel if rel else root
        wd = self._add(self.fd, os.fsencode(path), WATCHED)
        if wd < 0:
            err = ctypes.get_errno()
            if err in (errno.ENOENT, errno.ENOTDIR):
                return False  # gone again (a ref folder removed by pack-refs), or never a folder
            raise PermanentError(f"cannot watch {path}: {os.strerror(err)}")
        self._folders[wd] = (root, rel)
        return True

    def _watch_tree(self, root: Path, rel: str) -> None:
        """Watch a folder under refs/ and every folder below it (notes excepted)."""
        if not _watched_folder(rel) or not self._watch(root, rel):
            return
        with contextlib.suppress(OSError):
            for entry in os.scandir(root / rel):
                if entry.is_dir(follow_symlinks=False):
                    self._watch_tree(root, f"{rel}/{entry.name}")

    def read(self) -> bool:
        """Read every pending event; True when one of them can have moved a head."""
        moved = False
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return moved
            if not data:
                return moved
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, size = _EVENT.unpack_from(data, offset)
                raw = data[offset + _EVENT.size : offset + _EVENT.size + size]
                offset += _EVENT.size + size
                moved |= self._event(wd, mask, os.fsdecode(raw.rstrip(b"\0")))

    def _event(self, wd: int, mask: int, name: str) -> bool:
        if mask & IN_Q_OVERFLOW:
            # Events were lost: folders may have appeared unseen, and a head may have moved.
            for root in {root for root, _ in self._folders.values()}:
                self._watch_tree(root, "refs")
            return True
        if mask & IN_IGNORED:
            self._folders.pop(wd, None)  # the folder was removed, or unmounted
            return False
        where = self._folders.get(wd)
        if where is None:
            return False
        root, folder = where
        rel = f"{folder}/{name}" if folder else name
        if mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO) and _watched_folder(rel):
            # A new folder of refs: a ref may be renamed into it before its watch is in place.
            self._watch_tree(root, rel)
            return True
        return is_ref_change(rel)


async def _either(first: asyncio.Event, second: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(first.wait()), asyncio.ensure_future(second.wait())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


async def _settle(changed: asyncio.Event, quiet_s: float, longest_s: float) -> None:
    """Return once no change came for `quiet_s`, or `longest_s` after the first."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + longest_s
    while (left := deadline - loop.time()) > 0:
        changed.clear()
        try:
            async with asyncio.timeout(min(quiet_s, left)):
                await changed.wait()
        except TimeoutError:
            return
    changed.clear()


async def watch_refs(
    paths: list[Path],
    on_change: Callable[[], Awaitable[None]],
    *,
    stop: asyncio.Event,
    debounce_ms: int = 50,
) -> None:
    """Call `on_change` once per burst of ref changes in any of the repositories, until `stop` is set.

    `paths` are repositories (work trees, bare repos or mirrors). A burst ends
    after `debounce_ms` without a change, or a second after it began when the
    changes do not stop. A failing `on_change` is logged and the watch goes
    on: the next change, or the daemon's interval fetch, tries again.
    """
    dirs = [git_dir(p) for p in paths]
    quiet_s = max(1, debounce_ms) / 1000
    longest_s = max(20 * quiet_s, 1.0)
    loop = asyncio.get_running_loop()
    changed = asyncio.Event()
    with RefWatch(dirs) as watch:

        def readable() -> None:
            if watch.read():
                changed.set()

        loop.add_reader(watch.fd, readable)
        try:
            while not stop.is_set():
                await _either(changed, stop)
                if stop.is_set():
                    break
                await _settle(changed, quiet_s, longest_s)
                log.debug("refs.changed")
                try:
                    await on_change()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("refs.on_change_failed", error=str(exc), error_type=type(exc).__name__)
        finally:
            loop.remove_reader(watch.fd)
