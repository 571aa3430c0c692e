"""Apply a plan: a transaction per lane that changes, an observation per lane that does not.

Lanes are independent: they run concurrently, and nothing that goes wrong in
one lane (a failed step, a bug in lanes itself) stops another lane or the
cycle; it becomes that lane's result. Stops go first, since a deploy may need
the hosts they free; stops and deploys on the same hosts end as one swap
(`reconciler.execute.swap`), and a lane waits for the lanes its `after:` names.
A lane that serves is not taken on trust, whatever its plan says (in sync,
or held: a failed spec, a backoff, a lease, a change window, a failed swap):
its engine is asked once (`reconciler.execute.assess`), where the spec that
serves passed its gate, and its health follows the answer.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import structlog

from reconciler.execute.assess import Assessment, assessment_client, engine_answers
from reconciler.execute.health import Engine, HealthWatch, observed
from reconciler.execute.hostops import HostOps, LeaseHeldError
from reconciler.execute.inflight import InFlight, take_back_cancel
from reconciler.execute.leases import Leases
from reconciler.execute.results import ExecutorConfig, LaneResult, ProgressEvent, ProgressFn, Result
from reconciler.execute.secrets import SecretStore
from reconciler.execute.swap import SwapRun, resume_restores
from reconciler.execute.transaction import LaneTransaction, Shared
from reconciler.lane import (
    LANE_FILE,
    Blocked,
    Denied,
    Event,
    Internal,
    LaneHealth,
    Observed,
    PlanFailed,
    Seen,
    Suspended,
    Wanted,
)
from reconciler.plan.steps import AcquireLeases, Cause, LanePlan, Plan
from reconciler.spec.lane import Health
from reconciler.spec.load import DesiredState
from reconciler.store.journal import LaneRecord, Store
from reconciler.store.lanewriter import current, record

log = structlog.get_logger("lanes.execute")

INACTIVE = frozenset({"noop", "denied", "blocked", "fail", "suspended"})
PREEMPTIBLE = frozenset({"deploy", "verify"})
"""Transactions a newer commit may end at a safe point (a stop is short, and ends as it began)."""


class Executor:
    def __init__(
        self,
        ops: HostOps,
        store: Store,
        secrets: SecretStore,
        config: ExecutorConfig,
        progress: ProgressFn | None = None,
        inflight: InFlight | None = None,
        health: HealthWatch | None = None,
    ) -> None:
        self.ops = ops
        self.store = store
        self.secrets = secrets
        self.config = config
        self.progress = progress or (lambda _e: None)
        self.inflight = inflight
        """The daemon's operations: host locks shared with the other operations, and preemption."""
        self._host_locks: dict[str, asyncio.Lock] = inflight.host_locks if inflight is not None else {}
        self.health = health or HealthWatch()
        """In-sync lanes' kept health answers (the daemon's, `reconciler.execute.health`); none: ask each."""

    async def apply(self, plan: Plan, desired: DesiredState, lease_file: str) -> list[LaneResult]:
        leases = Leases(self.ops, lease_file, self.config.owner, desired.fleet.lease_ttl_s, self.progress)
        routes = self.inflight.routes if self.inflight is not None else None
        shared = Shared(self.ops, self.store, self.secrets, self.config, self.progress, leases, self.inflight, routes)
        by_name = {lp.lane: lp for lp in plan.lanes}
        # Read before the giving lanes stop: what each last passed its gate with, should its swap be undone.
        swaps = [
            SwapRun(shared, swap, by_name, {g: self.store.lane(g) for g in swap.giving}, desired) for swap in plan.swaps
        ]
        results: dict[str, LaneResult] = {}
        try:
            # A swap undo a killed daemon left half done is finished before anything else moves.
            results.update(await resume_restores(shared, by_name, desired))
            for run in list(swaps):
                not_begun = await self._begin_safely(run)
                if not_begun is not None:  # a taking lane's image cannot be had: nothing of this swap runs
                    results.update(not_begun)
                    swaps.remove(run)
            stops = [lp for lp in plan.lanes if lp.action == "stop" and lp.lane not in results]
            rest = [lp for lp in plan.lanes if lp.action != "stop" and lp.lane not in results]
            async with assessment_client(self.config.assess_timeout_s) as client:
                for lp in stops:
                    results[lp.lane] = await self._one_safely(lp, desired, shared, client)
                tasks: dict[str, asyncio.Future[LaneResult]] = {}

                swapping = {lane for run in swaps for lane in (*run.swap.giving, *run.swap.taking)}

                async def after_then_apply(lp: LanePlan) -> LaneResult:
                    # A swap's lanes end together (their undo needs every result): only a lane of its own is
                    # one a newer commit may end early.
                    me = asyncio.current_task()
                    preemptible = self.inflight is not None and lp.action in PREEMPTIBLE and lp.lane not in swapping
                    if preemptible and self.inflight is not None and me is not None:
                        self.inflight.tasks[lp.lane] = me
                    try:
                        waits = [tasks[d] for d in lp.after if d in tasks]
                        if waits:  # `after:` in the lane file: once those lanes finished, whatever their result
                            await asyncio.wait(waits)
                        return await self._one_safely(lp, desired, shared, client)
                    except asyncio.CancelledError:
                        by = self.inflight.preempted_by(lp.lane) if self.inflight is not None else None
                        if by is None:
                            raise
                        take_back_cancel()  # ended while it waited (for `after:` lanes, a host lock): nothing done
                        why = f"preempted by commit {by[:12]} before it began"
                        return LaneResult(lp.lane, lp.action, Result.PREEMPTED, why, cause=lp.cause)
                    finally:
                        if preemptible and self.inflight is not None:
                            self.inflight.tasks.pop(lp.lane, None)
                            self.inflight.preempting.pop(lp.lane, None)

                for lp in rest:
                    tasks[lp.lane] = asyncio.ensure_future(after_then_apply(lp))

                async def finish(run: SwapRun) -> dict[str, LaneResult]:
                    # Its giving lanes too: one stopped before a restart is a noop here, observed concurrently.
                    waits = [tasks[t] for t in (*run.swap.taking, *run.swap.giving) if t in tasks]
                    if waits:
                        await asyncio.wait(waits)
                    return await self._swap_safely(
                        run, {**results, **{t: tasks[t].result() for t in tasks if tasks[t].done()}}
                    )

                swapped = await asyncio.gather(*tasks.values(), *(finish(run) for run in swaps))
                results.update({lp.lane: tasks[lp.lane].result() for lp in rest})
                for amended in swapped[len(tasks) :]:
                    assert isinstance(amended, dict)
                    results.update(amended)
        finally:
            await leases.stop_renewals()  # every path gives its leases back; this only guards against leaks
        return [results[lp.lane] for lp in plan.lanes]

    async def _begin_safely(self, run: SwapRun) -> dict[str, LaneResult] | None:
        """A swap's pulls ahead of its stops; a bug in them lets the swap go on as it would have."""
        try:
            return await run.begin()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("swap.internal_error", swap=run.swap.describe(), error=str(exc))
            return None

    async def _swap_safely(self, run: SwapRun, results: dict[str, LaneResult]) -> dict[str, LaneResult]:
        """A swap's end (undo or env files); a bug in it leaves the lanes' own results, and says so."""
        try:
            return await run.finish(results)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("swap.internal_error", swap=run.swap.describe(), error=str(exc))
            for lane in run.swap.giving:
                self.progress(ProgressEvent(lane, "swap-rollback", "failed", f"{type(exc).__name__}: {exc}"))
            return {}

    async def _one_safely(self, lp: LanePlan, desired: DesiredState, shared: Shared, client: Assessment) -> LaneResult:
        try:
            return await self._one(lp, desired, shared, client)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in lanes costs this lane, never the others or the cycle
            error = f"lanes failed while applying this lane ({type(exc).__name__}: {exc}); other lanes went on"
            log.exception("lane.internal_error", lane=lp.lane, error=str(exc))
            try:
                record(self.store, lp.lane, Internal(why=error))
            except Exception as store_exc:  # the journal itself may be what failed
                log.warning("lane.internal_error_unrecorded", lane=lp.lane, error=str(store_exc))
            return LaneResult(lp.lane, lp.action, Result.FAILED, error, cause=Cause.INTERNAL_ERROR)

    async def _one(self, lp: LanePlan, desired: DesiredState, shared: Shared, client: Assessment) -> LaneResult:
        if lp.action in INACTIVE:
            return await self._observe(lp, desired, client)
        lane = desired.lanes.get(lp.lane)
        hosts = sorted({h for step in lp.steps if isinstance(step, AcquireLeases) for h in step.hosts})
        locks = [self._host_locks.setdefault(h, asyncio.Lock()) for h in hosts]
        for lock in locks:  # sorted order: no deadlock between lanes sharing hosts
            await lock.acquire()
        try:
            if lp.action == "stop":
                return await LaneTransaction(shared, lp, lane.health if lane else Health()).stop()
            assert lane is not None
            return await LaneTransaction(shared, lp, lane.health).deploy()
        finally:
            for lock in reversed(locks):
                lock.release()

    async def _observe(self, lp: LanePlan, desired: DesiredState, client: Assessment) -> LaneResult:
        """Record a lane this cycle does not act on: its health is what its engine answers, or why it waits."""
        lane = desired.lanes.get(lp.lane)
        if lane is None and lp.action == "noop":
            return LaneResult(lp.lane, lp.action, Result.NOOP, cause=lp.cause)
        rec = self.store.lane(lp.lane)
        wanted = Wanted(lane.desired if lane else "stopped", lp.commit, lp.hosts)
        error: str | None = lp.reason
        health = lane.health if lane else Health()
        event: Event
        if lp.action == "noop" and lane is not None and lane.running:
            engine = Engine(lp.fingerprint, self.ops.targets[lp.specs[0][0]].address, lane.port, health)
            event, result = observed(await self.health.look(lp.lane, engine, client)), Result.NOOP
            if (error := event.why) is not None:
                self.progress(ProgressEvent(lp.lane, "assess", "failed", error))
        elif lp.action == "noop":
            event, error, result = Observed(seen=Seen.NOTHING_RUNS), None, Result.NOOP
        elif lp.action == "denied":
            event, result = Denied(why=error), Result.DENIED
        elif lp.action == "suspended":
            # A person's hold (`lanes suspend`) stands in the lane's state until `lanes resume`: said again in its
            # own words; otherwise the lane file says hands off, for as long as it does.
            person = current(self.store, lp.lane).suspension
            by, why = (person.by, person.why) if person is not None else (LANE_FILE, error)
            event, result = Suspended(by=by, why=why), Result.SUSPENDED
        elif lp.cause not in UNASSESSED and (where := serving_gate(rec, self.ops.targets)) is not None:
            # Held (a failed spec, a backoff, a lease, a change window, a failed swap) or refused at planning,
            # while the spec that last passed its gate serves: its engine is asked, where it passed that gate.
            held = self._held_reason(lp, rec)
            address = self.ops.targets[str(where["host"])].address
            answer = await engine_answers(client, address, int(where["port"]), health)
            if answer is not None:
                error = f"{held}; the engine does not answer: {answer}"
                event = Observed(seen=Seen.NOT_ANSWERING, why=error)
                self.progress(ProgressEvent(lp.lane, "assess", "failed", error))
            elif lp.action == "fail":
                event, error = PlanFailed(why=held), held
            else:
                # Seen ready: healthy, or degraded while the lane's failed spec is held (the machine knows which).
                event, error = Observed(seen=Seen.READY, why=held), held
            result = Result.FAILED if lp.action == "fail" else Result.BLOCKED
        elif lp.action == "fail":
            # Failed at planning (a model path missing), before anything was stopped: what served serves.
            event, result = PlanFailed(why=error), Result.FAILED
        else:
            error = self._held_reason(lp, rec)
            unreachable = lp.cause == Cause.UNREACHABLE
            # A lease the probe saw held is retried on the curve of the error a transaction would have met.
            delay = LeaseHeldError.delay_s if lp.cause == Cause.LEASE_HELD else 0.0
            blocked = Blocked(by=lp.reason, why=error, delay_s=delay, jitter=random.random())  # noqa: S311 - jitter, not a secret
            event = Observed(seen=Seen.UNREACHABLE, why=error) if unreachable else blocked
            result = Result.BLOCKED
        events: list[Event] = [replace(event, wanted=wanted)]
        if lp.held_until is not None:  # a change window holds the lane's change until it opens
            events.append(Blocked(by="change window", until=lp.held_until, why=error))
        record(self.store, lp.lane, *events)
        error = error if result != Result.NOOP else None
        return LaneResult(lp.lane, lp.action, result, error, cause=lp.cause, held_until=lp.held_until)

    def _held_reason(self, lp: LanePlan, rec: LaneRecord | None) -> str:
        """Why a lane is held; for a spec held back after it failed, what it failed with (from the journal),
        and the swap that failure undid (from the record)."""
        if lp.cause not in HELD_AFTER_FAILURE:
            return lp.reason
        failed_with = self.store.failure_of(lp.lane, lp.fingerprint)
        if failed_with is None:
            why = lp.reason
        elif lp.cause == Cause.BACKOFF:
            why = failed_with  # says what failed, and when it is tried again
        else:
            why = f"{lp.reason} (it failed with: {failed_with})"
        return f"{why}; {rec.swap_undone}" if rec is not None and rec.swap_undone else why


HELD_AFTER_FAILURE = frozenset({Cause.CONDEMNED, Cause.BACKOFF})
"""Causes of a lane held back because its desired spec failed: what serves in its place is degraded at best."""
UNASSESSED = frozenset({Cause.UNREACHABLE, Cause.DENIED, Cause.SUSPENDED})
"""Held lanes whose engine is not asked: a host out of reach (already degraded, and a request there waits out
its timeout), a lane policy refused (denied whatever answers), a lane a person suspended (hands off)."""


def serving_gate(rec: LaneRecord | None, targets: Mapping[str, object]) -> dict[str, Any] | None:
    """Where the spec the record says serves passed its gate; None when the record says nothing serves (or
    names a host the fleet no longer has)."""
    if rec is None or not rec.fingerprint or not rec.healthy_gate or rec.health == LaneHealth.STOPPED:
        return None
    return rec.healthy_gate if str(rec.healthy_gate.get("host")) in targets else None


__all__ = ["Executor", "ExecutorConfig", "LaneResult", "ProgressEvent", "ProgressFn", "Result"]
