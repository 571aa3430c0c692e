"""What the daemon's lane operations share across cycles: host locks, each lane's task, and preemptions.

The daemon runs each lane change as an operation of its own, next to the cycles that keep planning;
two operations must still never touch one host at once (a host lock each), and a newer commit that
wants another spec of a lane in flight ends that lane's transaction at its next safe point. The
transaction reads here whether its cancellation is such a preemption (stop the new ranks, let the
newest spec follow) or a shutdown (put the last healthy spec back).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from reconciler.gateway.control import RouteControl


@dataclass
class InFlight:
    host_locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    tasks: dict[str, asyncio.Task[Any]] = field(default_factory=dict)
    """lane -> the task applying it (deploys and verifies: the transactions a newer commit may end)."""
    preempting: dict[str, str] = field(default_factory=dict)
    """lane -> the commit that ends its transaction (set just before the task is cancelled)."""
    routes: RouteControl | None = None
    """The gateway the daemon drives, which a rollout's drain and watch settle (None: none is driven)."""

    def preempt(self, lane: str, commit: str) -> bool:
        """End `lane`'s transaction at its next safe point for `commit`; False when none can be ended."""
        task = self.tasks.get(lane)
        if task is None or task.done():
            return False
        self.preempting[lane] = commit
        task.cancel()
        return True

    def preempted_by(self, lane: str) -> str | None:
        """The commit preempting `lane`, taken (a cancellation that is not one is a shutdown)."""
        return self.preempting.pop(lane, None)


def take_back_cancel() -> None:
    """The cancellation was a preemption, handled: the task goes on (to record it) as if never cancelled."""
    task = asyncio.current_task()
    if task is not None:
        while task.cancelling():
            task.uncancel()
