"""The HTTP server's table of open connections, and a log throttle.

Kept apart from `http.py` so the rule that bounds the server's memory and
descriptors reads in one place: at most `cap` connections are open; when a
new one arrives at a full table, the connection that has waited longest for
its request head gives up its slot (it would be the first to hit its head
deadline anyway), and if every open connection is past its head the new one
is closed unread.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any


@dataclass(eq=False)
class Conn:
    task: asyncio.Task[Any]
    since: float
    reading_head: bool = True
    transport: asyncio.Transport | None = None


class ConnTable:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._conns: dict[asyncio.Task[Any], Conn] = {}
        self._evicted: set[asyncio.Task[Any]] = set()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._conns)

    def full(self) -> bool:
        return len(self._conns) - len(self._evicted) >= self.cap

    def add(self, conn: Conn) -> None:
        self._conns[conn.task] = conn

    def remove(self, task: asyncio.Task[Any]) -> None:
        self._conns.pop(task, None)
        self._evicted.discard(task)

    def opened(self, task: asyncio.Task[Any], transport: asyncio.Transport) -> None:
        conn = self._conns.get(task)
        if conn is not None:
            conn.transport = transport

    def past_head(self, task: asyncio.Task[Any]) -> None:
        conn = self._conns.get(task)
        if conn is not None:
            conn.reading_head = False

    def evicted(self, task: asyncio.Task[Any]) -> bool:
        return task in self._evicted

    def evict_oldest_head(self) -> bool:
        """Free the slot of the connection waiting longest for its head; False when none is."""
        waiting = [c for c in self._conns.values() if c.reading_head and c.task not in self._evicted]
        if not waiting:
            return False
        victim = min(waiting, key=lambda c: c.since)
        # It stays in the table until its descriptor is closed, so the table counts descriptors, not hopes.
        self._evicted.add(victim.task)
        victim.task.cancel()
        self.evictions += 1
        return True

    def abort_all(self) -> set[asyncio.Task[Any]]:
        """Drop every connection (the server closes): a handler still running may finish; the tasks, to wait for."""
        for conn in self._conns.values():
            if conn.transport is not None:
                conn.transport.abort()
            else:
                conn.task.cancel()
        return set(self._conns)


class EveryInterval:
    """Say yes at most once per `interval_s`, counting the occurrences in between (a log throttle)."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._last = -float("inf")
        self._count = 0

    def due(self) -> bool:
        self._count += 1
        now = time.monotonic()
        if now - self._last < self.interval_s:
            return False
        self._last = now
        return True

    def take(self) -> int:
        """The occurrences since the last time it was due, this one included; the count starts again."""
        count, self._count = self._count, 0
        return count
