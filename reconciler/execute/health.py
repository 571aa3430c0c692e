"""In-sync lanes' health at a cadence of its own, off the cycle's critical path (issue 27).

A lane in sync whose ranks all run is healthy only while its engine answers its health path
(`reconciler.execute.assess`). `lanes plan` and `lanes apply` ask every such engine in their cycle: a person
running them expects a fresh answer. The daemon keeps the answers instead (`HealthWatch`): its cycle asks
only an engine it holds no fresh answer for (the daemon just started, the lane just converged or moved, the
answer older than `FRESH_INTERVALS` intervals), and otherwise records the kept answer, which changes
nothing in a lane that is as it was (the one writer writes only what changed). Between cycles the daemon's
health rounds (`HealthWatch.round`, a background job of the daemon every `tick_s`, a slice of
`health_interval_s`) ask the engines whose slice it is, `ASSESS_CONCURRENCY` at once, and hand what they
learn to the one writer of lane state exactly as the cycle does, so a lane whose engine stops answering is
degraded within about an interval and healthy again once it answers, whatever the resync interval. Each
lane has its slice (a hash of its name): the fleet's requests are spread over the interval in a trickle
rather than sent in one burst that a resync or a commit's cycle would share the CPU with.

So a commit's changes no longer wait behind 250 health requests, and a no-op resync asks none.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace

import structlog

from reconciler.execute.assess import Asking, Bounded, engine_answers
from reconciler.execute.results import ProgressEvent, ProgressFn
from reconciler.lane import Observed, Seen
from reconciler.spec.lane import Health
from reconciler.store.journal import Store
from reconciler.store.lanewriter import current, record

log = structlog.get_logger("lanes.health")

FRESH_INTERVALS = 2.0
"""A kept answer is fresh for the cycle while younger than this many health intervals: the round asks each
engine about once an interval, so only a round that could not run (a stopped loop, a journal that refused
writes) lets a cycle find answers this old, and then the cycle asks as it always did."""
SLICES = 6
"""Rounds per health interval, each asking the lanes of its slice (60 s: a round every 10 s)."""
MIN_TICK_S = 1.0
"""Rounds no closer than this: a short interval has fewer slices (1 s: one round a second, every lane)."""


@dataclass(frozen=True)
class Engine:
    """Whose health is asked: the lane's spec that serves, and where its head answers."""

    fingerprint: str | None
    address: str
    port: int
    health: Health

    @property
    def key(self) -> tuple[str | None, str, int, str]:
        return (self.fingerprint, self.address, self.port, self.health.path)


@dataclass(frozen=True)
class Answer:
    engine: Engine
    error: str | None
    """None: it answered 200; else what it answered, for a person."""
    at: float
    """When (monotonic s)."""
    told: bool = True
    """The lane's machine was told it (a cycle records every answer it uses; a round, those it may)."""


def not_answering(error: str) -> str:
    """A serving lane's engine that does not answer while every rank runs, said for people."""
    return f"every rank runs, but the engine does not answer: {error}"


def observed(error: str | None) -> Observed:
    """What an in-sync lane's health answer tells its machine (the same from the cycle and the round)."""
    if error is None:
        return Observed(seen=Seen.READY)
    return Observed(seen=Seen.NOT_ANSWERING, why=not_answering(error))


class HealthWatch:
    """In-sync serving lanes' engines, and their last answers. `interval_s` None: no cadence of its own,
    every cycle asks (`lanes plan`, `lanes apply`)."""

    def __init__(self, interval_s: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self.watched: dict[str, Engine] = {}
        """Lanes the last cycles found in sync and running, and whom to ask."""
        self.answers: dict[str, Answer] = {}
        self.asked = 0
        """Engines asked, by cycles and rounds (what tests and the bench count)."""
        self.ticks = 0
        """Rounds run: which slice is next."""

    @property
    def slices(self) -> int:
        if self.interval_s is None:
            return 1
        return max(1, min(SLICES, int(self.interval_s // MIN_TICK_S)))

    @property
    def tick_s(self) -> float | None:
        """Seconds between two rounds (the daemon's interval job); None: no rounds."""
        return self.interval_s / self.slices if self.interval_s is not None else None

    def fresh(self, lane: str, engine: Engine) -> Answer | None:
        """The lane's kept answer when it is about this very engine and young enough for a cycle to use."""
        kept = self.answers.get(lane)
        if self.interval_s is None or kept is None or kept.engine.key != engine.key:
            return None
        return kept if self.clock() - kept.at < FRESH_INTERVALS * self.interval_s else None

    async def look(self, lane: str, engine: Engine, client: Bounded) -> str | None:
        """A cycle's look at an in-sync lane: its fresh kept answer, else the engine's own (kept)."""
        self.watched[lane] = engine
        kept = self.fresh(lane, engine)
        if kept is not None:
            return kept.error
        return await self._ask(lane, engine, client, told=True)

    async def _ask(self, lane: str, engine: Engine, client: Bounded, *, told: bool) -> str | None:
        self.asked += 1
        error = await engine_answers(client, engine.address, engine.port, engine.health)
        if self.watched.get(lane) == engine:  # else forgotten meanwhile (changed, in flight): not kept
            self.answers[lane] = Answer(engine, error, self.clock(), told)
        return error

    def forget(self, lanes: set[str] | frozenset[str]) -> None:
        """Lanes no longer in sync and running (changed, held, stopped, gone): not asked until a cycle finds
        them so again, and then asked at once."""
        for lane in lanes:
            self.watched.pop(lane, None)
            self.answers.pop(lane, None)

    def due(self, tick: int) -> dict[str, Engine]:
        """The watched engines the round of `tick` asks: those of its slice (unless a cycle asked one in the
        last half round), and any whose answer is older than an interval and a round (a round was skipped)."""
        if self.interval_s is None or self.tick_s is None:
            return {}
        now, n, slot = self.clock(), self.slices, tick % self.slices
        recent, overdue = self.tick_s / 2, self.interval_s + self.tick_s
        out = {}
        for lane, engine in self.watched.items():
            kept = self.answers.get(lane)
            age = now - kept.at if kept is not None and kept.engine.key == engine.key else overdue
            mine = zlib.crc32(lane.encode()) % n == slot
            if age >= overdue or (mine and age >= recent):
                out[lane] = engine
        return out

    async def round(
        self, store: Store, timeout_s: float, progress: ProgressFn, busy: Callable[[], frozenset[str]]
    ) -> int:
        """Ask the due engines (`ASSESS_CONCURRENCY` at once, each within `timeout_s`) and record what each
        answered through the one writer; `busy`: lanes an operation changes now, left to it. Returns how many
        lanes' states the answers changed."""
        due = self.due(self.ticks)
        self.ticks += 1
        if not due:
            return 0
        changed = 0

        async def one(lane: str, engine: Engine, client: Bounded) -> None:
            nonlocal changed
            before = self.answers.get(lane)
            error = await self._ask(lane, engine, client, told=False)
            # Checked and recorded with no await between: what a cycle or an operation did meanwhile stands.
            if self.watched.get(lane) != engine or lane in busy():
                return
            now = self.answers[lane]
            if before is not None and before.told and before.engine.key == engine.key and before.error == error:
                self.answers[lane] = replace(now, told=True)
                return  # the same answer its machine was told last: nothing to tell (nor read, nor write)
            state = current(store, lane)
            if state.transaction is not None or (state.serving is not None and state.serving != engine.fingerprint):
                return  # changed since the cycle that watched it: the next cycle looks at it afresh
            if error is not None:
                progress(ProgressEvent(lane, "assess", "failed", not_answering(error)))
            after, _ = record(store, lane, observed(error))
            self.answers[lane] = replace(now, told=True)
            changed += after != state

        client = Asking(timeout_s)
        ended = await asyncio.gather(
            *(one(lane, engine, client) for lane, engine in due.items()), return_exceptions=True
        )
        for lane, end in zip(due, ended, strict=True):
            if isinstance(end, Exception):  # one lane's record (a journal fault, a bug) costs that lane's look only
                log.warning("health.record_failed", lane=lane, error=f"{type(end).__name__}: {end}")
        # Said when it changed a lane: a round every few seconds that found all well is not news for the journal.
        (log.info if changed else log.debug)("health.round", asked=len(due), changed=changed)
        return changed
