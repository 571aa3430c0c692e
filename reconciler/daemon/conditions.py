"""What stands between the daemon and its job right now, said where people look.

Three things outside the daemon can stop it from converging the fleet without
anything being wrong with the lanes: the git remote does not answer, the disk
under the journal refuses writes, or another reconciler holds a host's lease.
None of them may crash the daemon or change what runs; each must be visible
(/healthz, /status, /metrics, the log) and each clears by itself when the
cause goes away. This module keeps their state and their wording; the
service decides what to do about them.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reconciler.source.mirror import public_url
from reconciler.store.journal import Store

STORE_RETRY_S = 2.0
"""How soon to try the journal again after the disk refused a write: one small write, cheap to repeat."""

CRASH_RETRY_FIRST_S = 2.0
CRASH_RETRY_MAX_S = 60.0
"""A cycle that crashed (a bug) is tried again after 2, 4, 8 ... s, at most a minute apart. Lanes blocked by a
lease are not paced here: their hold says when (`reconciler.lane.lease_delay`, from the error's delay_s)."""


def _ago(since: float | None, now: float) -> str:
    return f"{max(0.0, now - since):.0f} s" if since is not None else "?"


@dataclass
class SourceHealth:
    """Fetches of the state repository: whether the last one worked, since when they fail, how often."""

    url: str
    failures: int = 0
    """Consecutive failed fetches (0 once one works)."""
    total_failures: int = 0
    error: str | None = None
    failing_since: float | None = None
    last_success: float | None = None

    def __post_init__(self) -> None:
        self.url = public_url(self.url)  # shown in /status, /healthz and `lanes status`: never `user:token@`

    def failed(self, error: str, now: float | None = None) -> None:
        now = time.time() if now is None else now
        self.failures += 1
        self.total_failures += 1
        self.error = error
        if self.failing_since is None:
            self.failing_since = now

    def succeeded(self, now: float | None = None) -> float | None:
        """Record a working fetch; returns how long fetches had failed (None when they had not)."""
        now = time.time() if now is None else now
        down = None if self.failing_since is None else now - self.failing_since
        self.failures = 0
        self.error = None
        self.failing_since = None
        self.last_success = now
        return down

    def describe(self, now: float | None = None) -> str | None:
        if self.error is None:
            return None
        now = time.time() if now is None else now
        return (
            f"fetch of {self.url} failing for {_ago(self.failing_since, now)} "
            f"({self.failures} attempt{'s' if self.failures != 1 else ''}): {self.error}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "ok": self.error is None,
            "error": self.error,
            "failures": self.failures,
            "failing_since": self.failing_since,
            "last_success": self.last_success,
        }


class Backoff:
    """Delays that double from `first` up to `cap`, with jitter so two daemons do not retry in step."""

    def __init__(self, first: float = CRASH_RETRY_FIRST_S, cap: float = CRASH_RETRY_MAX_S) -> None:
        self.first = first
        self.cap = cap
        self._next = first

    def next(self) -> float:
        delay = self._next
        self._next = min(self.cap, self._next * 2)
        return delay * random.uniform(0.75, 1.25)  # noqa: S311 - jitter, not a secret

    def reset(self) -> None:
        self._next = self.first


class Retries:
    """At most one pending "look again" per reason; a newer one replaces it."""

    def __init__(self, kick: Callable[[str], None]) -> None:
        self._kick = kick
        self._handles: dict[str, asyncio.TimerHandle] = {}

    def later(self, reason: str, delay: float) -> None:
        self.cancel(reason)
        self._handles[reason] = asyncio.get_running_loop().call_later(delay, self._kick, reason)

    def cancel(self, reason: str) -> None:
        handle = self._handles.pop(reason, None)
        if handle is not None:
            handle.cancel()

    def cancel_all(self) -> None:
        for reason in list(self._handles):
            self.cancel(reason)


def store_problem(store: Store, now: float | None = None) -> str | None:
    if store.problem is None:
        return None
    now = time.time() if now is None else now
    return (
        f"journal not writable for {_ago(store.problem_since, now)} ({store.problem}); "
        f"{store.held_writes} record(s) held in memory; no host is changed until it can be written"
    )


def store_status(store: Store) -> dict[str, Any]:
    return {
        "path": str(store.path),
        "writable": store.problem is None,
        "problem": store.problem,
        "since": store.problem_since,
        "held_writes": store.held_writes,
    }


def health(phase: str, store: Store, source: SourceHealth, blocked: dict[str, str]) -> tuple[bool, str]:
    """/healthz: unhealthy only when the daemon cannot do its job (the journal); the rest is said, not failed."""
    trouble = store_problem(store)
    if trouble is not None:
        return False, trouble
    notes = [phase]
    fetch = source.describe()
    if fetch is not None:
        notes.append(fetch)
    notes += [f"{lane} blocked: {why}" for lane, why in sorted(blocked.items())]
    return True, "; ".join(notes)
