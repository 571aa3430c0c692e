"""How a lane transaction ends: passed, blocked, failed (and rolled back), interrupted or preempted."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import replace

from reconciler.cancel import cancel_requested
from reconciler.errors import (
    StepFailedError,
)
from reconciler.execute.inflight import take_back_cancel
from reconciler.execute.leases import LeaseBlockedError
from reconciler.execute.results import LaneResult, ProgressEvent, Result
from reconciler.execute.rollback import put_back
from reconciler.execute.rolloutsteps import drain
from reconciler.execute.txbase import TxBase
from reconciler.facts.enginelog import engine_words
from reconciler.lane import (
    Blocked,
    Gate,
    GatePassed,
    Interrupted,
    Phase,
    Preempted,
    Progressed,
    Restored,
    RestoreHealthy,
    Serving,
    StepFailed,
    restore_target,
)
from reconciler.plan.specjson import spec_to_json
from reconciler.plan.steps import (
    Cause,
    Drain,
    WaitReady,
)
from reconciler.store.lanewriter import current, record


class TxEndings(TxBase):
    # -- endings ----------------------------------------------------------------

    def _succeeded(self) -> LaneResult:
        lp = self.lp
        self.timings["total"] = round(time.monotonic() - self.t0, 3)
        head = next((step for step in reversed(lp.steps) if isinstance(step, WaitReady)), None)
        gate_at = Gate(head.host, head.port, head.served_model) if head is not None else None
        specs = tuple(spec_to_json(h, s) for h, s in lp.specs)
        drift = {"time": time.time(), "commit": lp.commit, "items": [d.to_json() for d in self.drift]}
        if lp.cause == Cause.RESTORED_DRIFT:
            # The last healthy spec put back and seen ready again: degraded, as before its drift, with what drifted
            # named; the failed spec's condemnation or backoff is left as it was (the machine keeps it).
            commit = self.before.healthy_commit if self.before else None
            passed = GatePassed(serving=Serving(lp.fingerprint or "", specs, gate_at, commit), why=lp.reason)
            self._end(Result.ROLLED_BACK, passed, timings=self.timings, drift=drift)
            return self._result(Result.ROLLED_BACK, lp.reason)
        verified = lp.action == "verify"
        result = Result.VERIFIED if verified else Result.APPLIED
        passed = GatePassed(serving=Serving(lp.fingerprint or "", specs, gate_at, lp.commit))
        self._end(result, passed, timings=self.timings, drift=drift if self.drift else None)
        return self._result(result)

    async def _blocked(self, exc: LeaseBlockedError) -> LaneResult:
        """Someone else holds a host: give back what was taken, keep the lane's health, say who holds it."""
        await self.s.leases.give_back(self.held)
        self._record(Blocked(by=exc.holder, why=str(exc), delay_s=exc.delay_s, jitter=random.random()))  # noqa: S311 - jitter
        self.s.progress(ProgressEvent(self.lp.lane, "lease", "info", f"blocked: {exc}"))
        return self._result(Result.BLOCKED, str(exc), Cause.LEASE_HELD)

    async def _failed(self, exc: StepFailedError) -> LaneResult:
        lp, store = self.lp, self.s.store
        if cancel_requested():
            # A library turned the cancel into an error (see reconciler.cancel): still a preemption or a shutdown.
            by = self._preempted_by()
            if by is not None:
                return await self._preempted(by)
            await self._interrupted()
            raise asyncio.CancelledError from exc
        if self.s.inflight is not None:
            # From here the lane is put back (its new ranks stopped, the healthy spec restarted and gated): a
            # newer commit waits for that to end rather than cut a restore in half.
            self.s.inflight.tasks.pop(lp.lane, None)
        if lp.cause == Cause.RESTORED_DRIFT:
            return await self._repair_failed(exc)
        if self.beside and not self.touched:
            return await self._beside_failed(exc)
        why = self._repairing(str(exc))
        failed = StepFailed(touched=exc.touched, transient=exc.transient, delay_s=exc.delay_s, why=why)
        if not exc.touched:
            # Nothing stopped yet: old ranks that served still serve, but not the desired spec.
            message = self._end(Result.FAILED, failed) or why
            await self.s.leases.give_back(self.held)
            return replace(self._result(Result.FAILED, message), untouched=True)  # notifications say nothing stopped
        self.s.progress(ProgressEvent(lp.lane, "rollback", "started", str(exc)))
        # The failure first: the lane machine decides what is put back (its `RestoreHealthy` effect: the last
        # healthy spec, unless it is the one that failed) or that the new ranks are stopped alone (`StopNew`),
        # and the lane reads "restoring" while that runs.
        _state, effects = record(store, lp.lane, failed)
        back = next((e.serving for e in effects if isinstance(e, RestoreHealthy)), None)
        step_id = store.step_started(self.run, lp.lane, lp.commit, 1000, "rollback", {"error": str(exc)})
        restore = await put_back(self.s.ops, lp, back, self.health, self.s.config.log_tail)
        store.step_finished(step_id, error=None if restore.ok else (restore.error or "no previous spec"))
        # The failed ranks' own words (vLLM's "unrecognized arguments ..."), read from the tails the restore kept
        # of them before stopping them: the lane's last error carries them to every place that shows it.
        engine = engine_words(restore.logs)
        if restore.ok:
            to = restore.healthy_commit[:12] if restore.healthy_commit else "previous"
            restored, result = Restored(ok=True, why=f"rolled back to {to}", engine=engine), Result.ROLLED_BACK
        else:
            tail = f"restoring the previous spec failed: {restore.error}" if restore.attempted else None
            restored, result = Restored(ok=False, why=tail, engine=engine), Result.FAILED
        message = self._end(result, restored, logs=restore.logs) or why
        self.s.progress(ProgressEvent(lp.lane, "rollback", "done" if restore.ok else "failed", message))
        await self.s.leases.give_back(self.held)
        return self._result(result, message, logs=restore.logs)

    async def _beside_failed(self, exc: StepFailedError) -> LaneResult:
        """Blue/green failed before the old ranks stopped: the traffic goes back to them first, then the new
        ranks stop (their last log lines kept), and the old spec serves on as it did (nothing was touched)."""
        lp = self.lp
        self._record(Progressed(phase=Phase.BESIDE))  # the route derives from this: the old ranks again
        if self.s.routes is not None and self.watched is not None:
            # The new head took traffic: out of the route (the old ranks have it again), its requests finish.
            w = self.watched
            await drain(self.s.ops, Drain(w.model, w.host, w.port, w.drain_s), self.s.routes, lp.lane, self.s.progress)
        elif self.s.routes is not None:
            await self.s.routes.settle()
        logs: dict[str, str] = {}
        if self.started_beside:
            logs = (await put_back(self.s.ops, lp, None, self.health, self.s.config.log_tail)).logs
        why = f"{exc}; the traffic went back to the old ranks, which never stopped, and the new ranks were stopped"
        failed = StepFailed(
            touched=False, transient=exc.transient, delay_s=exc.delay_s, why=why, engine=engine_words(logs)
        )
        message = self._end(Result.FAILED, failed, logs=logs) or why
        self.s.progress(ProgressEvent(lp.lane, "rollback", "done", message))
        await self.s.leases.give_back(self.held)
        return replace(self._result(Result.FAILED, message, logs=logs), untouched=True)

    async def _repair_failed(self, exc: StepFailedError) -> LaneResult:
        """The last healthy spec could not be put back: said, and nothing else blamed (the held spec's
        condemnation or backoff stays as it was; the healthy spec is not condemned, it is simply not serving)."""
        lp, logs = self.lp, {}
        if exc.touched:
            logs = (await put_back(self.s.ops, lp, None, self.health, self.s.config.log_tail)).logs
            why = f"{exc}; nothing of the lane serves now"
        else:
            why = f"{exc} (before any rank stopped)"
        message = self._repairing(f"putting the last healthy spec back failed: {why}")
        failed = StepFailed(touched=exc.touched, transient=False, why=message, engine=engine_words(logs))
        self._end(Result.FAILED, failed, logs=logs)
        self.s.progress(ProgressEvent(lp.lane, "repair", "failed", message))
        await self.s.leases.give_back(self.held)
        return self._result(Result.FAILED, message, logs=logs)

    async def _interrupted(self) -> None:
        """Shutdown (SIGTERM) in the middle of a transaction: put the last healthy spec back without
        waiting for it to load (that can take longer than the stop timeout); the caller lets the cancel go on."""
        lp, store = self.lp, self.s.store
        if self.started_beside and not self.touched:
            # Blue/green: the old ranks never stopped; the new ones are stopped, and what served serves on.
            self._record(Progressed(phase=Phase.BESIDE))
            await put_back(self.s.ops, lp, None, self.health, self.s.config.log_tail)
        if self.touched:
            step_id = store.step_started(self.run, lp.lane, lp.commit, 1000, "rollback", {"error": "shutdown"})
            # What a failure would put back (`reconciler.lane.restore_target`), restarted without its gate.
            back = restore_target(current(store, lp.lane), lp.fingerprint)
            restore = await put_back(self.s.ops, lp, back, self.health, self.s.config.log_tail, wait=False)
            store.step_finished(step_id, error=None if restore.ok else (restore.error or "no previous spec"))
            if restore.ok:
                message = "interrupted by shutdown; previous spec restarted without waiting for it to load"
            else:
                message = "interrupted by shutdown; " + (restore.error or "no previous spec")
            restarted = restore.fingerprint if restore.ok else None
            self._end(
                Result.ROLLED_BACK if restore.ok else Result.FAILED,
                Interrupted(touched=True, restarted=restarted, why=message),
                logs=restore.logs,
            )
        else:
            message = "interrupted by shutdown before any rank was stopped"
            self._record(Interrupted(touched=False, why=message))
        await self.s.leases.give_back(self.held)

    def _preempted_by(self) -> str | None:
        return self.s.inflight.preempted_by(self.lp.lane) if self.s.inflight is not None else None

    async def _preempted(self, by: str) -> LaneResult:
        """A newer commit wants another spec: stop what this transaction started (finishing a half-done stop
        or start), restore nothing (the newest spec is applied next, and a restore would cost an engine load),
        and say so. Before any rank stopped, what served serves on."""
        take_back_cancel()
        lp, store = self.lp, self.s.store
        logs: dict[str, str] = {}
        if self.started_beside and not self.touched:
            self._record(Progressed(phase=Phase.BESIDE))  # blue/green: the old ranks take the traffic back
            if self.s.routes is not None:
                await self.s.routes.settle()
            logs = (await put_back(self.s.ops, lp, None, self.health, self.s.config.log_tail)).logs
        if self.touched:
            step_id = store.step_started(self.run, lp.lane, lp.commit, 1000, "preempt", {"by": by})
            logs = (await put_back(self.s.ops, lp, None, self.health, self.s.config.log_tail)).logs
            store.step_finished(step_id)
            message = f"preempted by commit {by[:12]}: the ranks it started were stopped; the newest spec follows"
            self._end(Result.PREEMPTED, Preempted(touched=True, why=message), logs=logs)
        else:
            message = f"preempted by commit {by[:12]} before any rank was stopped: what served still serves"
            self._end(Result.PREEMPTED, Preempted(touched=False, why=message))
        self.s.progress(ProgressEvent(lp.lane, "preempt", "done", message))
        await self.s.leases.give_back(self.held)
        return self._result(Result.PREEMPTED, message, logs=logs)
