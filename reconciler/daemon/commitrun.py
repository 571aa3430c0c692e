"""A commit whose lane operations are still in flight, and what they did so far: its record waits for them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from reconciler.execute.cycle import CycleResult
from reconciler.execute.results import LaneResult
from reconciler.source.loadcommit import LoadedCommit


@dataclass
class CommitRun:
    """A commit whose lane operations are still in flight: its record is written once the last one ends."""

    loaded: LoadedCommit
    cycle: CycleResult
    """The cycle that started them (its verdict and probe)."""
    results: dict[str, LaneResult] = field(default_factory=dict)
    open: set[str] = field(default_factory=set)
    """Lanes whose operation of this commit is in flight."""
    judging: set[str] = field(default_factory=set)
    """Lanes the last cycle of this commit left to their preflight: the commit is not decided before them."""
    reaction: bool = False
    """Started by a commit's reaction (its changed lanes alone): only the full cycle after it decides the commit."""
    t0: float = field(default_factory=time.monotonic)

    def add(self, results: list[LaneResult]) -> None:
        self.results.update({r.lane: r for r in results})

    def merged(self) -> CycleResult:
        return replace(self.cycle, results=list(self.results.values()), started=(), in_flight=())
