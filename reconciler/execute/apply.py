"""Apply a plan: a transaction per lane that changes, an observation per lane that does not.

Lanes are independent: they run concurrently, and nothing that goes wrong in
one lane (a failed step, a bug in lanes itself) stops another lane or the
cycle; it becomes that lane's result. Stops go first, since a deploy may need
the hosts they free. In-sync lanes are not taken on trust: their engine is
asked once (`reconciler.execute.assess`) and their health follows the answer.
"""

from __future__ import annotations

import asyncio

import httpx
import structlog

from reconciler.execute.assess import assessment_client, engine_answers
from reconciler.execute.hostops import HostOps
from reconciler.execute.leases import Leases
from reconciler.execute.record import settle
from reconciler.execute.results import ExecutorConfig, LaneResult, ProgressEvent, ProgressFn, Result
from reconciler.execute.secrets import SecretStore
from reconciler.execute.transaction import LaneTransaction, Shared
from reconciler.plan.health import Outcome
from reconciler.plan.planner import FAILED_BEFORE
from reconciler.plan.steps import AcquireLeases, Cause, LanePlan, Plan
from reconciler.spec.lane import Health
from reconciler.spec.load import DesiredState
from reconciler.store.journal import Store

log = structlog.get_logger("lanes.execute")

INACTIVE = frozenset({"noop", "denied", "blocked", "fail", "suspended"})


class Executor:
    def __init__(
        self,
        ops: HostOps,
        store: Store,
        secrets: SecretStore,
        config: ExecutorConfig,
        progress: ProgressFn | None = None,
    ) -> None:
        self.ops = ops
        self.store = store
        self.secrets = secrets
        self.config = config
        self.progress = progress or (lambda _e: None)
        self._host_locks: dict[str, asyncio.Lock] = {}

    async def apply(self, plan: Plan, desired: DesiredState, lease_file: str) -> list[LaneResult]:
        leases = Leases(self.ops, lease_file, self.config.owner, desired.fleet.lease_ttl_s, self.progress)
        shared = Shared(self.ops, self.store, self.secrets, self.config, self.progress, leases)
        stops = [lp for lp in plan.lanes if lp.action == "stop"]
        rest = [lp for lp in plan.lanes if lp.action != "stop"]
        try:
            async with assessment_client(self.config.assess_timeout_s) as client:
                results = [await self._one_safely(lp, desired, shared, client) for lp in stops]
                results += await asyncio.gather(*(self._one_safely(lp, desired, shared, client) for lp in rest))
        finally:
            await leases.stop_renewals()  # every path gives its leases back; this only guards against leaks
        return list(results)

    async def _one_safely(
        self, lp: LanePlan, desired: DesiredState, shared: Shared, client: httpx.AsyncClient
    ) -> LaneResult:
        try:
            return await self._one(lp, desired, shared, client)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in lanes costs this lane, never the others or the cycle
            error = f"lanes failed while applying this lane ({type(exc).__name__}: {exc}); other lanes went on"
            log.exception("lane.internal_error", lane=lp.lane, error=str(exc))
            try:
                settle(self.store, lp.lane, Outcome.INTERNAL_ERROR, last_error=error)
            except Exception as store_exc:  # the journal itself may be what failed
                log.warning("lane.internal_error_unrecorded", lane=lp.lane, error=str(store_exc))
            return LaneResult(lp.lane, lp.action, Result.FAILED, error, cause=Cause.INTERNAL_ERROR)

    async def _one(
        self, lp: LanePlan, desired: DesiredState, shared: Shared, client: httpx.AsyncClient
    ) -> LaneResult:
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

    async def _observe(self, lp: LanePlan, desired: DesiredState, client: httpx.AsyncClient) -> LaneResult:
        """Record a lane this cycle does not act on: its health is what its engine answers, or why it waits."""
        lane = desired.lanes.get(lp.lane)
        if lane is None and lp.action == "noop":
            return LaneResult(lp.lane, lp.action, Result.NOOP, cause=lp.cause)
        rec = self.store.lane(lp.lane)
        fields: dict[str, object] = {
            "desired": lane.desired if lane else "stopped",
            "desired_commit": lp.commit,
            "hosts": lp.hosts,
        }
        error: str | None = lp.reason
        if lp.action == "noop" and lane is not None and lane.running:
            head = lp.specs[0][0]
            error = await engine_answers(client, self.ops.targets[head].address, lane.port, lane.health)
            outcome = Outcome.OBSERVED_READY if error is None else Outcome.OBSERVED_NOT_ANSWERING
            if error is not None:
                error = f"every rank runs, but the engine does not answer: {error}"
                self.progress(ProgressEvent(lp.lane, "assess", "failed", error))
            result = Result.NOOP
        elif lp.action == "noop":
            outcome, error, result = Outcome.NOTHING_RUNS, None, Result.NOOP
        elif lp.action == "denied":
            outcome, result = Outcome.DENIED, Result.DENIED
        elif lp.action == "suspended":
            outcome, result = Outcome.SUSPENDED, Result.SUSPENDED
        elif lp.action == "fail":
            # Refused at planning (a model path missing), before anything was stopped: what served serves.
            outcome, result = Outcome.FAILED_UNTOUCHED, Result.FAILED
        else:
            outcome = Outcome.UNREACHABLE if lp.cause == Cause.UNREACHABLE else Outcome.WAITING
            result = Result.BLOCKED
            error = _blocked_reason(lp, rec.last_error if rec else None)
        settle(self.store, lp.lane, outcome, last_error=error, held_until=lp.held_until, **fields)
        error = error if result != Result.NOOP else None
        return LaneResult(lp.lane, lp.action, result, error, cause=lp.cause, held_until=lp.held_until)


def _blocked_reason(lp: LanePlan, previous: str | None) -> str:
    """Why a lane is blocked; for a spec held back after it failed, keep what it failed with in view."""
    if not previous or lp.cause not in {Cause.CONDEMNED, Cause.BACKOFF}:
        return lp.reason
    if lp.cause == Cause.BACKOFF or FAILED_BEFORE in previous:
        return previous  # already says what failed, and when it is tried again or that it is held
    return f"{lp.reason} (it failed with: {previous})"


__all__ = ["Executor", "ExecutorConfig", "LaneResult", "ProgressEvent", "ProgressFn", "Result"]
