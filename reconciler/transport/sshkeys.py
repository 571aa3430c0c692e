"""The SSH client keys, parsed once and parsed again only when a key file changes.

Given paths, asyncssh reads and parses every key file at every connect and keeps its own parsed copy per
connection: at 1,000 connections that was about 3 MB of the daemon's RSS (bench/README.md, issue 27,
"Memory at 1,000 hosts"). Loaded once with `asyncssh.load_keypairs` and given to every connect, the pairs
are shared. A key rotated on disk is still picked up at the next connect: each connect compares every key
file's (and its `-cert.pub`'s, which asyncssh pairs with it) identity, size and mtime with the ones the keys
were loaded from, one `stat` each, and loads them again when any differs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import asyncssh

_Stamp = tuple[tuple[int, int, int, int], ...]


class ClientKeys:
    """The key pairs of `paths`, kept while the files are unchanged."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = list(paths)
        self._loaded: tuple[_Stamp, Sequence[asyncssh.SSHKeyPair]] | None = None
        self.loads = 0
        """How many times the files were parsed (for tests)."""

    def get(self) -> Sequence[asyncssh.SSHKeyPair]:
        """The pairs; raises what `asyncssh.load_keypairs` raises (OSError naming the file, ValueError for a
        key it cannot import), so a connect reports an unreadable key as it did with paths."""
        stamp = self._stamp()
        if self._loaded is None or self._loaded[0] != stamp:
            keys = asyncssh.load_keypairs(list(self.paths))
            self.loads += 1
            self._loaded = (stamp, keys)
        return self._loaded[1]

    def _stamp(self) -> _Stamp:
        out = []
        for path in self.paths:
            for name in (path, f"{path}-cert.pub"):
                try:
                    st = os.stat(name)
                except FileNotFoundError:
                    out.append((0, 0, -1, 0))  # absent (a certificate is optional): absent again is unchanged
                    continue
                except OSError:
                    out.append((0, 0, -2, 0))  # unreadable: load_keypairs says why
                    continue
                out.append((st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns))
        return tuple(out)
