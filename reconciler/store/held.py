"""Writes the control node's disk refused, kept in order until it takes them again.

The daemon records every step and every outcome in sqlite. When the disk
under the database is full (or read-only, or failing), a record that cannot be
written must neither crash the daemon nor be dropped: the hosts already did
what it describes. So a refused write waits here, in memory and in order, and
every later write queues behind it (an older upsert written after a newer one
would undo it). `flush()` writes them out once the disk accepts writes again.

While anything is held the daemon starts no new work (it checks `flush()`
before each cycle): what runs on the hosts stays as it is, and `problem`
says why. Nothing is held across a restart: a daemon killed while writes are
held loses those records, and its next cycle plans from what the hosts run.
"""

from __future__ import annotations

import sqlite3
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

Write = Callable[[], None]


class HeldWrites:
    """A FIFO of writes the database refused, and why it refused the first one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._queue: deque[Write] = deque()
        self.problem: str | None = None
        """Why the last write failed (`database or disk is full`), None once everything is written."""
        self.since: float | None = None
        """When writes started failing (unix time), None while they succeed."""

    def __len__(self) -> int:
        return len(self._queue)

    def run(self, write: Write) -> bool:
        """Write now, or queue behind what is held; False when the write is held."""
        if self._queue and not self.flush():
            self._queue.append(write)
            return False
        try:
            write()
        except sqlite3.OperationalError as exc:
            self._failed(exc)
            self._queue.append(write)
            return False
        self.problem = None
        self.since = None
        return True

    def flush(self) -> bool:
        """Write what is held, oldest first; True when nothing is held any more."""
        while self._queue:
            try:
                self._queue[0]()
            except sqlite3.OperationalError as exc:
                self._failed(exc)
                return False
            self._queue.popleft()
        self.problem = None
        self.since = None
        return True

    def probe(self, write: Write) -> bool:
        """A write that only checks the disk takes writes (not queued when refused)."""
        if not self.flush():
            return False
        try:
            write()
        except sqlite3.OperationalError as exc:
            self._failed(exc)
            return False
        return True

    def _failed(self, exc: sqlite3.OperationalError) -> None:
        self.problem = f"cannot write {self.path}: {exc}"
        if self.since is None:
            self.since = time.time()
