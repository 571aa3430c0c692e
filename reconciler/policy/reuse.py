"""What evaluating an unchanged commit again need not compute again: each lane's rendered ranks and budget.

The daemon evaluates the policies after every probe, since the budget takes each idle host's free memory
and rendering takes each host's RDMA devices; but at 250 lanes rendering every rank and sizing every
lane's KV cost most of the evaluation (about 0.7 s of a profiled no-op resync at 1,000 hosts, bench/README.md
issue 27), and a lane's share of it reads only the commit and the facts of that lane's own hosts. So each
piece is kept per lane with the facts it read, and used again while the commit's loaded state and policies
(the same objects: the decider loads a commit once) and those facts compare equal. Anything else
evaluates afresh. One entry per lane and kind, for one loaded commit: bounded by the commit's lanes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class Reuse:
    """Per lane, the last result of each kind of work and the facts it read, for one loaded commit."""

    def __init__(self) -> None:
        self._basis: tuple[object, object] | None = None
        self._kept: dict[tuple[str, str], tuple[object, object]] = {}
        self.hits = 0
        """Results given again (tests and benches read it)."""

    def begin(self, desired: object, policies: object) -> None:
        """An evaluation of `desired` under `policies` starts: what another commit left is dropped."""
        if self._basis is None or self._basis[0] is not desired or self._basis[1] is not policies:
            self._basis = (desired, policies)
            self._kept.clear()

    def get(self, kind: str, lane: str, facts: object, make: Callable[[], T]) -> T:
        """`make()`'s result for `lane`, or the one kept, when the facts it read then equal `facts` now."""
        kept = self._kept.get((kind, lane))
        if kept is not None and kept[0] == facts:
            self.hits += 1
            return kept[1]  # type: ignore[return-value]  # kept by this same call site: the same T
        value = make()
        self._kept[(kind, lane)] = (facts, value)
        return value
