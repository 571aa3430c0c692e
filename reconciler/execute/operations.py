"""The daemon's lane operations in flight: each independent change runs as a task of its own.

A cycle plans the whole fleet in seconds; the transactions it starts (pull, stop, start, a
readiness gate that real engines pass after ten minutes) run here, so the daemon goes on reacting
to new commits, webhooks and operators while they run. A lane in flight is left out of later
cycles until its operation ends, unless a newer commit wants another spec of it: then its
transaction is ended at its next safe point (`InFlight.preempt`) and the cycle that follows
applies the newest spec. A shutdown cancels every operation, whose transactions put the last
healthy spec back as they always did. Trials on spare hosts run beside them, their lanes in flight
too and their hosts held (`reconciler.execute.trials`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog

from reconciler.execute.inflight import InFlight
from reconciler.execute.results import LaneResult, Result
from reconciler.execute.trials import Trials
from reconciler.plan.operations import touched_hosts
from reconciler.plan.steps import Plan

log = structlog.get_logger("lanes.operations")
T = TypeVar("T")


@dataclass
class Operation:
    """One group of lanes that change together (a swap, `after:`, shared hosts), at one commit."""

    commit: str
    plan: Plan
    started: float = field(default_factory=time.time)
    preempted_by: str | None = None

    @property
    def lanes(self) -> tuple[str, ...]:
        return tuple(lp.lane for lp in self.plan.lanes)

    def describe(self) -> dict[str, Any]:
        return {
            "lanes": list(self.lanes),
            "commit": self.commit,
            "actions": {lp.lane: lp.action for lp in self.plan.lanes},
            "started": self.started,
            "preempted_by": self.preempted_by,
        }


RunFn = Callable[[Plan], Awaitable[list[LaneResult]]]
DoneFn = Callable[[Operation, list[LaneResult]], Awaitable[None]]


class Operations:
    def __init__(self, on_trial_end: Callable[[bool], None] = lambda _replan: None) -> None:
        self.inflight = InFlight()
        self.trials = Trials(self.inflight, on_trial_end)
        """Trials on spare hosts; `on_trial_end(replan)` once one let go of its hosts."""
        self._by_lane: dict[str, Operation] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._judging: set[str] = set()
        self.tried: set[str] = set()
        """Preflight keys tried in this process (`judge`)."""

    def busy(self) -> frozenset[str]:
        """Lanes whose operation has not ended, whose arguments their image is judging, or a trial runs."""
        return frozenset(self._by_lane) | frozenset(self._judging) | self.trials.lanes()

    def changing(self) -> frozenset[str]:
        """Hosts the operations in flight run on or change."""
        return frozenset(h for op in self._by_lane.values() for lp in op.plan.lanes for h in touched_hosts(lp))

    async def trial(
        self,
        lanes: tuple[str, ...],
        hosts: tuple[str, ...],
        attempt: Callable[[], Coroutine[Any, Any, T]],
        cleanup: Callable[[], Coroutine[Any, Any, None]],
    ) -> T:
        """Run a trial of `lanes` on spare `hosts` beside the operations (`Trials.run`)."""
        return await self.trials.run(lanes, hosts, self.changing, attempt, cleanup)

    def judging(self) -> frozenset[str]:
        """Lanes whose arguments their image is judging (`judge`)."""
        return frozenset(self._judging)

    def targets(self) -> dict[str, tuple[str | None, str]]:
        """lane in flight -> (the fingerprint its operation brings up, its plan's action)."""
        out: dict[str, tuple[str | None, str]] = {}
        for lane, op in self._by_lane.items():
            lp = op.plan.lane(lane)
            if lp is not None:
                out[lane] = (lp.fingerprint, lp.action)
        return out

    def preempt(self, lane: str, commit: str) -> bool:
        """End `lane`'s transaction for `commit` at its next safe point (False: it cannot be ended early)."""
        op = self._by_lane.get(lane)
        if op is not None and op.preempted_by is not None:
            # Being ended already: a second cancel would land inside its ending (stopping what it started) and
            # cut that short, losing its record. Two cycles close together both ask (a commit's reaction and
            # the full cycle after it); the newest spec is planned once the operation ended, either way.
            op.preempted_by = commit
            return True
        if op is None or not self.inflight.preempt(lane, commit):
            return False
        op.preempted_by = commit
        log.info("operation.preempting", lane=lane, commit=op.commit[:12], by=commit[:12])
        return True

    def start(self, commit: str, plan: Plan, run: RunFn, done: DoneFn) -> Operation:
        op = Operation(commit, plan)
        for lane in op.lanes:
            assert lane not in self._by_lane, f"{lane} is in flight already"
            self._by_lane[lane] = op
        task = asyncio.create_task(self._run(op, run, done), name=f"operation:{','.join(op.lanes)}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        log.info("operation.started", lanes=list(op.lanes), commit=commit[:12])
        return op

    async def _run(self, op: Operation, run: RunFn, done: DoneFn) -> None:
        t0 = time.monotonic()
        try:
            results = await run(op.plan)
        except Exception as exc:
            # The executor keeps a lane's fault in that lane; what escapes it (the leases' own bookkeeping)
            # costs this operation only, said per lane, and the next cycle plans them again.
            log.exception("operation.crashed", lanes=list(op.lanes), error=str(exc))
            error = f"lanes failed while applying ({type(exc).__name__}: {exc}); planned again"
            results = [LaneResult(lp.lane, lp.action, Result.FAILED, error, cause=lp.cause) for lp in op.plan.lanes]
        except BaseException:  # a shutdown's cancel: the lanes are no longer in flight
            self._release(op)
            raise
        log.info(
            "operation.ended",
            lanes=list(op.lanes),
            commit=op.commit[:12],
            results={r.lane: r.result.value for r in results},
            seconds=round(time.monotonic() - t0, 3),
        )
        try:
            # What follows a change (its record, the benchmark of a lane that changed) is still the operation's:
            # a newer commit must not redeploy a lane while its evidence is measured.
            await done(op, results)
        finally:
            self._release(op)

    def _release(self, op: Operation) -> None:
        for lane in op.lanes:
            if self._by_lane.get(lane) is op:
                del self._by_lane[lane]

    def judge(self, lanes: dict[str, str], run: Callable[[], Awaitable[None]], done: Callable[[], None]) -> None:
        """Judge lanes' arguments in their images (lane -> the preflight's key) in the background: a pull and
        an engine import take minutes, and the cycle must not wait for them. Until it ends those lanes are
        in flight (no change of theirs starts); a key is tried once per process, so an image that judges
        nothing (no python3) lets its lane go ahead at the next cycle rather than be tried forever."""
        fresh = {lane: key for lane, key in lanes.items() if lane not in self._by_lane and key not in self.tried}
        if not fresh:
            return
        for lane in fresh:
            self._judging.add(lane)
        self.tried.update(fresh.values())

        async def body() -> None:
            try:
                await run()
            except Exception as exc:  # a fault of the preflight judges nothing; the change goes ahead
                log.exception("preflight.crashed", lanes=sorted(fresh), error=str(exc))
            finally:
                self._judging.difference_update(fresh)
            done()

        task = asyncio.create_task(body(), name=f"preflight:{','.join(sorted(fresh))}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        log.info("preflight.started", lanes=sorted(fresh))

    def snapshot(self) -> list[dict[str, Any]]:
        seen: dict[int, Operation] = {id(op): op for op in self._by_lane.values()}
        return [op.describe() for op in sorted(seen.values(), key=lambda o: o.started)]

    async def stop(self, timeout_s: float) -> None:
        """Shutdown: every operation cancelled (its transactions put the last healthy spec back), waited for."""
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await asyncio.gather(*tasks, return_exceptions=True)

    async def idle(self) -> None:
        """Until no operation (nor what runs after one ends) is left: tests and `lanes apply` style callers."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
