"""A swap as one transaction: what comes before its lanes' own transactions, and what follows them.

Before: the taking lanes' images are pulled and checked, so an image that cannot be had leaves the
giving lanes serving, untouched (`begin`). After: the giving lanes stopped (first, as every stop) and
the taking lanes ran their deploys. If every taking lane passed its readiness gate, the giving lanes'
env files go (they were kept: a rollback needs them). If one did not, the swap is undone: the taking
lanes leave the hosts (a failed one was already put back by its own transaction; one that passed is
stopped), and each giving lane is started again on the spec it last passed its gate with, and gated
again where it passed it: its health is observed, never inferred. The planner then holds both sides
until the failed lane changes (`reconciler.plan.swaps`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from reconciler.errors import LanesError, StepFailedError
from reconciler.execute.hostops import gather_hosts
from reconciler.execute.leases import LeaseBlockedError
from reconciler.execute.results import LaneResult, ProgressEvent, Result
from reconciler.execute.rollback import Restore, restart_healthy
from reconciler.execute.transaction import LaneTransaction, Shared
from reconciler.lane import Blocked, Event, GatePassed, LaneState, Restored, StepFailed, SwapUndone, Wanted
from reconciler.lane import Stopped as LaneStopped
from reconciler.plan.specjson import spec_from_json
from reconciler.plan.steps import Cause, LanePlan, Swap
from reconciler.spec.lane import Health
from reconciler.spec.load import DesiredState
from reconciler.store.journal import LaneRecord
from reconciler.store.lanestate import state_from_record
from reconciler.store.lanewriter import current, record
from reconciler.store.swaprestore import clear_restore, mark_restore, pending_restores

TAKEN = frozenset({Result.APPLIED, Result.VERIFIED})
"""A taking lane's results that count as having taken its hosts."""
SWAP_ROLLED_BACK = "swap rolled back"
"""How the giving and taking lanes' errors, and so `lanes status` and the commit's note, name the undo (for
people: the code reads the record's `swap_undone`, never this sentence)."""


@dataclass
class SwapRun:
    shared: Shared
    swap: Swap
    plans: Mapping[str, LanePlan]
    before: Mapping[str, LaneRecord | None]
    """The giving lanes' records from before they stopped: what they last passed their gate with."""
    desired: DesiredState
    _runs: dict[str, str] = field(default_factory=dict)
    _started: float = field(default_factory=time.time)

    async def begin(self) -> dict[str, LaneResult] | None:
        """Before any giving lane stops: the taking lanes' images pulled and checked (digest, driver,
        launcher). None to go on; else the results of a swap that did not begin, the giving lanes serving."""
        for t in self.swap.taking:
            lp = self.plans[t]
            lane = self.desired.lanes.get(t)
            if lp.action != "deploy" or lane is None:
                continue
            try:
                await LaneTransaction(self.shared, lp, lane.health).pull_ahead()
            except StepFailedError as exc:
                return self._not_begun(t, exc)
        return None

    def _not_begun(self, failed: str, exc: StepFailedError) -> dict[str, LaneResult]:
        store = self.shared.store
        out: dict[str, LaneResult] = {}
        kept = ", ".join(self.swap.giving)
        for t in self.swap.taking:
            lp = self.plans[t]
            wanted = Wanted("running", lp.commit, lp.hosts)
            event: Event
            if t == failed:
                why = f"{exc}; the swap did not begin: {kept} kept serving"
                event = StepFailed(
                    touched=False, transient=exc.transient, delay_s=exc.delay_s, fingerprint=lp.fingerprint, why=why,
                    wanted=wanted,
                )  # fmt: skip
                result = Result.FAILED
            else:
                why = f"the swap did not begin ({failed}: {exc}); {kept} kept serving"
                event, result = Blocked(by=failed, why=why, wanted=wanted), Result.BLOCKED

            def journal(state: LaneState, t: str = t, lp: LanePlan = lp, result: Result = result) -> None:
                # The apply row first, then the record (as a transaction ends: see LaneTransaction._end).
                message = state.error.message if state.error else None
                store.record_apply(
                    store.new_run(), t, lp.commit, lp.fingerprint, result.value, message, time.time(), {},
                    cause=lp.cause.value,
                )  # fmt: skip

            state, _effects = record(store, t, event, journal=journal)
            message = state.error.message if state.error else why
            out[t] = LaneResult(t, lp.action, result, message, cause=lp.cause)
        for g in self.swap.giving:
            lp = self.plans[g]
            message = f"kept serving: the swap to {', '.join(self.swap.taking)} did not begin ({failed}: {exc})"
            wanted = replace(current(store, g).wanted, commit=lp.commit)
            record(store, g, Blocked(by=", ".join(self.swap.taking), why=message, wanted=wanted))
            self.shared.progress(ProgressEvent(g, "swap", "info", message))
            out[g] = LaneResult(g, lp.action, Result.BLOCKED, message, cause=Cause.SWAP_HELD)
        return out

    async def finish(self, results: Mapping[str, LaneResult]) -> dict[str, LaneResult]:
        """The swap's lanes' results as they end: unchanged when it went through, amended when it was undone."""
        failed = [t for t in self.swap.taking if t in results and results[t].result not in TAKEN]
        # Stopped now, or (a noop) stopped at this commit before a restart and kept for this swap.
        gave = [g for g in self.swap.giving if g in results and results[g].result in {Result.STOPPED, Result.NOOP}]
        if not failed:
            await self._remove_env()
            return {}
        if not gave:
            return {}  # nothing was given up: nothing to bring back
        return await self._undo(failed, gave, results)

    async def _remove_env(self) -> None:
        by_host: dict[str, list[str]] = {}
        for host, path in self.swap.remove_env:
            by_host.setdefault(host, []).append(path)
        errors = await gather_hosts([self.shared.ops.remove_env_files(h, p) for h, p in by_host.items()])
        for lane in self.swap.giving:
            detail = "; ".join(str(e) for e in errors) if errors else "env files of the stopped ranks removed"
            self.shared.progress(ProgressEvent(lane, "env-files-remove", "failed" if errors else "done", detail))

    async def _undo(
        self, failed: list[str], gave: list[str], results: Mapping[str, LaneResult]
    ) -> dict[str, LaneResult]:
        s = self.shared
        self._started = time.time()
        why = "; ".join(f"{t} {results[t].result.value}: {results[t].error or 'no reason given'}" for t in failed)
        cause = f"{', '.join(failed)} did not take {', '.join(self.swap.hosts)}"
        for g in gave:
            # Before any host is touched: a daemon killed from here on still brings the lane back (`resume`).
            mark_restore(s.store, g, taking=failed, hosts=self.swap.hosts, cause=cause, why=why)
            s.progress(ProgressEvent(g, "swap-rollback", "started", f"{cause}: {g} comes back"))
        held: list[str] = []
        restores: dict[str, Restore]
        try:
            await s.leases.take(self.swap.hosts, held, gave[0])
            await self._clear_takers(results)
            waits = (s.ops.wait_gpu_free(h, s.config.gpu_free_timeout_s) for h in self.swap.hosts)
            await asyncio.gather(*waits, return_exceptions=True)  # the gate below says whether it serves
            done = await asyncio.gather(*(self._restart(g, cause) for g in gave))
            restores = dict(zip(gave, done, strict=True))
        except (LeaseBlockedError, LanesError, OSError) as exc:
            restores = {g: Restore(ok=False, attempted=True, error=str(exc)) for g in gave}
        finally:
            await s.leases.give_back(held)
        out = {g: self._settle_giving(g, restores[g], cause, why, results[g]) for g in gave}
        back = [g for g in gave if restores[g].ok]
        tail = (
            f"{SWAP_ROLLED_BACK}: {', '.join(back)} serve(s) again on the previous spec"
            if back
            else f"{SWAP_ROLLED_BACK}, but {', '.join(gave)} could not be brought back"
        )
        for t in self.swap.taking:
            if t in results:
                out[t] = self._settle_taking(t, results[t], tail)
        return out

    async def _clear_takers(self, results: Mapping[str, LaneResult]) -> None:
        """A taking lane that passed its gate leaves the hosts again (a failed one already left them)."""
        stops = [
            self.shared.ops.stop_remove(host, spec.name)
            for t in self.swap.taking
            if t in results and results[t].result in TAKEN
            for host, spec in self.plans[t].specs
        ]
        errors = await gather_hosts(stops)
        if errors:
            raise LanesError("; ".join(str(e) for e in errors))

    async def _restart(self, lane: str, cause: str) -> Restore:
        """The lane's last healthy spec started and gated, as one journaled step of its own run."""
        store, lp = self.shared.store, self.plans[lane]
        self._runs[lane] = run = store.new_run()
        step_id = store.step_started(run, lane, lp.commit, 1000, "swap-rollback", {"describe": f"{cause}: restore"})
        healthy = state_from_record(self.before.get(lane)).healthy
        if healthy is None or not healthy.specs:
            restore = Restore(ok=False, attempted=False, error="no healthy spec on record to bring back")
        else:
            spec = self.desired.lanes.get(lane)
            # The gate the lane passed with: its file's health settings, if the commit still has the file.
            restore = await restart_healthy(self.shared.ops, healthy, spec.health if spec else Health())
        store.step_finished(step_id, error=None if restore.ok else restore.error or "not restored")
        return restore

    def _settle_giving(self, lane: str, restore: Restore, cause: str, why: str, result: LaneResult) -> LaneResult:
        store, lp = self.shared.store, self.plans[lane]
        rec = self.before.get(lane)
        run, started = self._runs.get(lane) or store.new_run(), self._started
        if restore.ok:
            to = (restore.healthy_commit or "")[:12] or "previous"
            message = f"{SWAP_ROLLED_BACK}: {cause} ({why}); {lane} serves its previous spec ({to}) again, seen ready"
            final = Result.ROLLED_BACK
        else:
            message = f"{SWAP_ROLLED_BACK}: {cause} ({why}); bringing {lane} back failed: {restore.error}"
            final = Result.FAILED
        fingerprint = rec.fingerprint if rec else None
        store.record_apply(
            run, lane, lp.commit, fingerprint, final.value, message, started, {}, restore.logs, cause=lp.cause.value
        )
        healthy = current(store, lane).healthy
        if restore.ok and healthy is not None:
            # The gate passed just now: what serves is observed, and it is the spec the lane last ran.
            record(store, lane, GatePassed(serving=healthy, why=message))
        else:
            record(store, lane, Restored(ok=False, why=message))
        self.shared.progress(ProgressEvent(lane, "swap-rollback", "done" if restore.ok else "failed", message))
        clear_restore(store, lane)
        return replace(result, result=final, error=message)

    def _settle_taking(self, lane: str, result: LaneResult, tail: str) -> LaneResult:
        store = self.shared.store
        if result.result in TAKEN:
            message = f"passed its gate, then stopped again: {tail}"
            record(store, lane, LaneStopped(why=message))
            return replace(result, result=Result.ROLLED_BACK, error=message)
        message = f"{result.error or result.result.value}; {tail}"
        record(store, lane, SwapUndone(undone=tail, why=message))
        return replace(result, error=message)


async def resume_restores(
    shared: Shared, plans: Mapping[str, LanePlan], desired: DesiredState
) -> dict[str, LaneResult]:
    """Finish the swap undos a killed daemon left: each giving lane still stopped is brought back, gated.

    A lane whose plan is no longer "nothing runs, nothing to do" (its ranks run: the undo got that far;
    or the commit changed it) has nothing to finish: its mark goes.
    """
    store, out = shared.store, {}
    for lane, info in sorted(pending_restores(store).items()):
        lp = plans.get(lane)
        if lp is None:
            continue  # not in this cycle (a trial's cycle plans one lane): left for the daemon's next one
        if lp.action != "noop" or lp.cause != Cause.NOTHING_RUNS:
            clear_restore(store, lane)
            continue
        taking = [str(t) for t in info.get("taking") or ()]
        swap = Swap((lane,), tuple(taking), tuple(str(h) for h in info.get("hosts") or lp.hosts))
        run = SwapRun(shared, swap, {lane: lp}, {lane: store.lane(lane)}, desired)
        cause, why = str(info.get("cause") or "the swap failed"), str(info.get("why") or "")
        shared.progress(ProgressEvent(lane, "swap-rollback", "started", f"{cause}: {lane} comes back (resumed)"))
        held: list[str] = []
        rec = run.before.get(lane)
        try:
            await shared.leases.take(swap.hosts, held, lane)
            # Ranks the killed undo may have left half started are removed first: a name in use refuses a run.
            previous = [spec_from_json(d) for d in rec.healthy_specs] if rec else []
            await gather_hosts([shared.ops.stop_remove(h, spec.name) for h, spec in previous])
            restore = await run._restart(lane, cause)
        except (LeaseBlockedError, LanesError, OSError) as exc:
            restore = Restore(ok=False, attempted=True, error=str(exc))
        finally:
            await shared.leases.give_back(held)
        out[lane] = run._settle_giving(lane, restore, cause, why, LaneResult(lane, lp.action, Result.NOOP))
        tail = (
            f"{SWAP_ROLLED_BACK}: {lane} serve(s) again on the previous spec"
            if restore.ok
            else f"{SWAP_ROLLED_BACK}, but {lane} could not be brought back"
        )
        for t in taking:
            rec_t = store.lane(t)
            if rec_t is not None and not rec_t.swap_undone:
                said = f"{rec_t.last_error or 'failed its gate'}; {tail}"
                record(store, t, SwapUndone(undone=tail, why=said))
    return out
