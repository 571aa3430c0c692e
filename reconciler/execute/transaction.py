"""One lane transaction: deploy, verify or stop one lane, with a health gate and a rollback.

deploy: lease -> pull (digest verified) -> env files -> stop old ranks -> (drop caches) -> start ranks
in the engine's order -> readiness gate -> record. verify: lease -> readiness gate of ranks that already
run the desired spec but were never seen ready (a daemon killed during the wait). stop: lease -> stop
-> remove the ranks' env files. A deploy whose new ranks passed the gate then removes the env files of
old ranks that it did not write (best effort, as that removal is: a failure is said, nothing undone).

Everything that can fail without touching running ranks (leases, pulls, secrets) happens before the
old ranks stop, so such a failure leaves the old lane serving. After that, a failure keeps each rank's
last log lines, stops the new ranks and restores the last healthy spec. The error decides what follows
(`reconciler.errors`): a transient fault retries the spec after a backoff, a permanent one condemns it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from reconciler.cancel import cancel_requested
from reconciler.engines import ContainerSpec
from reconciler.errors import (
    ImageNeedsNewerDriverError,
    NotReadyError,
    PullFailedError,
    RemoteCommandError,
    StepFailedError,
)
from reconciler.execute.gate import gate
from reconciler.execute.hostops import HostOps, gather_hosts
from reconciler.execute.inflight import InFlight, take_back_cancel
from reconciler.execute.leases import LeaseBlockedError, Leases
from reconciler.execute.results import ExecutorConfig, LaneResult, ProgressEvent, ProgressFn, Result
from reconciler.execute.rollback import put_back
from reconciler.execute.rolloutsteps import drain, pre_promotion, watch
from reconciler.execute.secrets import SecretStore, env_file_text
from reconciler.execute.stagestep import run_stage
from reconciler.facts.cudareq import REQUIRE_VAR, driver_gives, required_cuda
from reconciler.facts.enginelog import engine_words
from reconciler.gateway.control import RouteControl
from reconciler.lane import (
    Blocked,
    Event,
    Gate,
    GatePassed,
    Interrupted,
    LaneState,
    Phase,
    Preempted,
    Progressed,
    Restored,
    RestoreHealthy,
    Serving,
    Started,
    StepFailed,
    Stopped,
    TxKind,
    Wanted,
    restore_target,
)
from reconciler.plan.specjson import spec_to_json
from reconciler.plan.steps import (
    AcquireLeases,
    Cause,
    Drain,
    DropCaches,
    LanePlan,
    PullImages,
    RemoveEnvFiles,
    RolloutKind,
    StageModel,
    StartRanks,
    Step,
    StopContainers,
    WaitGpuFree,
    WaitReady,
    Watch,
    WriteEnvFiles,
)
from reconciler.spec.lane import Health
from reconciler.store.journal import Store
from reconciler.store.lanewriter import current, record


@dataclass
class Shared:
    """What every transaction of one apply shares: the hosts, the journal, the leases."""

    ops: HostOps
    store: Store
    secrets: SecretStore
    config: ExecutorConfig
    progress: ProgressFn
    leases: Leases
    inflight: InFlight | None = None
    """The daemon's operations (None for `lanes apply`, which nothing preempts)."""
    routes: RouteControl | None = None
    """The gateway the daemon drives (None: no gateway, or `lanes apply`): drains and watches settle it."""


class _NotDoneError(Exception):
    """A best-effort step did not get done: journaled and said, not a failure of the lane."""


class LaneTransaction:
    def __init__(self, shared: Shared, lp: LanePlan, health: Health) -> None:
        self.s = shared
        self.lp = lp
        self.health = health
        self.run = shared.store.new_run()
        self.started = time.time()
        self.t0 = time.monotonic()
        self.held: list[str] = []
        self.started_ranks: list[tuple[str, ContainerSpec]] = []
        self.timings: dict[str, float] = {}
        self.touched = False
        self.before = shared.store.lane(lp.lane)
        self.drift = lp.drift if lp.cause in {Cause.DRIFT, Cause.RESTORED_DRIFT} else ()
        """What drifted, when repairing it is why this transaction runs (a new spec is not drift)."""
        self.beside = lp.rollout is not None and lp.rollout.kind is RolloutKind.BLUE_GREEN
        """Blue/green: the new ranks start beside the old ones, which serve until the watch passed."""
        self.started_beside = False
        self.watched: Watch | None = None
        """Blue/green's watch once it began: the new head has taken traffic, and an abort drains it first."""

    # -- the three kinds ------------------------------------------------------

    async def stop(self) -> LaneResult:
        lp = self.lp
        wanted = Wanted("stopped", lp.commit, lp.hosts)
        self._record(Started(kind=TxKind.STOP, fingerprint=None, commit=lp.commit, wanted=wanted))
        try:
            for seq, step in enumerate(lp.steps):
                await self._step(seq, step)
        except LeaseBlockedError as exc:
            return await self._blocked(exc)
        except StepFailedError as exc:
            self._end(Result.FAILED, StepFailed(touched=True, transient=False, why=str(exc)))
            return self._result(Result.FAILED, str(exc))
        finally:
            await self.s.leases.give_back(self.held)
        self._end(Result.STOPPED, Stopped())
        return self._result(Result.STOPPED)

    async def deploy(self) -> LaneResult:
        """A deploy, or a verify (whose plan has only the lease and the gate, over ranks that already run)."""
        lp = self.lp
        if lp.action == "verify":
            self.started_ranks = list(lp.specs)
            self.touched = True  # the ranks under test serve nothing yet: a failure must stop them
        if lp.action == "verify":
            kind, phase = TxKind.VERIFY, Phase.GATING
        else:
            kind, phase = (TxKind.RESTORE if lp.cause == Cause.RESTORED_DRIFT else TxKind.DEPLOY), Phase.PREPARING
        wanted = Wanted("running", lp.commit, lp.hosts)
        deadline = self._gate_deadline() if phase == Phase.GATING else None
        self._record(
            Started(
                kind=kind, fingerprint=lp.fingerprint, commit=lp.commit, phase=phase, deadline=deadline, wanted=wanted
            )
        )
        if self.drift:
            self.s.progress(ProgressEvent(lp.lane, "drift", "info", "; ".join(d.describe() for d in self.drift)))
        try:
            for seq, step in enumerate(lp.steps):
                await self._step(seq, step)
        except LeaseBlockedError as exc:
            return await self._blocked(exc)
        except StepFailedError as exc:
            return await self._failed(exc)
        except asyncio.CancelledError:
            by = self._preempted_by()
            if by is not None:
                return await self._preempted(by)
            await self._interrupted()
            raise
        await self.s.leases.give_back(self.held)
        return self._succeeded()

    async def pull_ahead(self) -> None:
        """Only the plan's pulls (journaled as this lane's steps): a swap pulls its taking lanes' images
        before its giving lanes stop, so an image that cannot be had leaves them serving."""
        for seq, step in enumerate(self.lp.steps):
            if isinstance(step, PullImages):
                await self._step(seq, step)

    # -- steps ------------------------------------------------------------------

    async def _step(self, seq: int, step: Step) -> None:
        store, lp = self.s.store, self.lp
        step_id = store.step_started(self.run, lp.lane, lp.commit, seq, step.kind, {"describe": step.describe()})
        self.s.progress(ProgressEvent(lp.lane, step.kind, "started", step.describe()))
        try:
            await self._do(step)
        except _NotDoneError as exc:
            # Best effort (removing env files no rank needs): journaled and said, the lane goes on.
            store.step_finished(step_id, error=str(exc))
            self.s.progress(ProgressEvent(lp.lane, step.kind, "failed", str(exc)))
            return
        except BaseException as exc:
            store.step_finished(step_id, error=str(exc) or type(exc).__name__)
            self.s.progress(ProgressEvent(lp.lane, step.kind, "failed", str(exc)))
            if isinstance(exc, StepFailedError | asyncio.CancelledError):
                raise
            if isinstance(exc, Exception):
                # An error no step expects (a bug, an OS error): the step failed, permanently.
                message = f"{type(exc).__name__}: {exc}"
                raise StepFailedError(step.kind, message, touched=self.touched) from exc
            raise
        store.step_finished(step_id)
        self.s.progress(ProgressEvent(lp.lane, step.kind, "done", step.describe()))

    async def _do(self, step: Step) -> None:
        ops = self.s.ops
        run: Callable[[], Awaitable[None]]
        if isinstance(step, AcquireLeases):
            run = partial(self.s.leases.take, step.hosts, self.held, self.lp.lane)
        elif isinstance(step, PullImages):
            run = partial(self._pull, step)
        elif isinstance(step, StageModel):
            run = partial(self._stage, step)
        elif isinstance(step, WriteEnvFiles):
            run = partial(self._env_files, step)
        elif isinstance(step, StopContainers) and self.beside:
            # Blue/green's old ranks, once the new spec took the traffic and passed its watch: the route stays
            # on the new ranks (WATCHING) until the transaction ends; a stop that fails is drift for the next
            # resync, never a reason to move the traffic back.
            run = partial(self._stop_old, step)
        elif isinstance(step, StopContainers):
            self.touched = True
            self._record(Progressed(phase=Phase.STOPPING))
            run = partial(self._stop, step)
        elif isinstance(step, DropCaches):
            run = partial(self._drop, step)
        elif isinstance(step, WaitGpuFree):
            run = partial(self._gpu_free, step)
        elif isinstance(step, StartRanks) and self.beside:
            self.started_beside = True
            self._record(Progressed(phase=Phase.BESIDE))
            run = partial(self._start, step)
        elif isinstance(step, StartRanks):
            self.touched = True
            self._record(Progressed(phase=Phase.STARTING))
            run = partial(self._start, step)
        elif isinstance(step, Drain):
            self._record(Progressed(phase=Phase.DRAINING))
            run = partial(drain, ops, step, self.s.routes, self.lp.lane, self.s.progress)
        elif isinstance(step, Watch):
            run = partial(self._watch, step)
        elif isinstance(step, RemoveEnvFiles):
            run = partial(self._remove_env_files, step)
        else:
            assert isinstance(step, WaitReady)
            if self.lp.action != "verify":  # a verify starts at its gate
                phase = Phase.BESIDE if self.beside else Phase.GATING
                self._record(Progressed(phase=phase, deadline=self._gate_deadline()))
            ranks = self.started_ranks
            run = partial(gate, ops, step, self.health, ranks, self.timings, self.t0, self.s.config.watch_interval_s)
        await run()

    async def _pull(self, step: PullImages) -> None:
        async def one(host: str, image: str) -> None:
            try:
                env = await self.s.ops.pull(host, image)
            except RemoteCommandError as exc:
                # A pull the host or registry refused is a fault of the moment (registry down, link cut);
                # an image that is not the pinned digest (DigestMismatchError) is not.
                raise PullFailedError(exc) from exc
            needed, gives = required_cuda(env), dict(step.host_cuda).get(host)
            if needed is not None and gives is not None and not driver_gives(gives, needed):
                raise ImageNeedsNewerDriverError(
                    f"{host}: {image} needs CUDA {needed} or later (its {REQUIRE_VAR}), and the driver there "
                    f"supports CUDA {gives}: the NVIDIA runtime would refuse to start it"
                )
            if step.needs:
                # Before anything stops: an image without its launcher is refused here, not in the gate.
                await self.s.ops.check_launcher(host, image, step.needs)

        errors = await gather_hosts([one(h, image) for h, image in step.pulls])
        if errors:
            raise StepFailedError.wrap("pull", errors, touched=False)

    async def _stage(self, step: StageModel) -> None:
        await run_stage(step, self.s.ops, self.s.config, self.s.store, self.lp.lane, self.s.progress)

    async def _env_files(self, step: WriteEnvFiles) -> None:
        texts = [
            (host, path, env_file_text([(env, self.s.secrets.get(name)) for env, name in pairs]))
            for host, path, pairs in step.files
        ]
        errors = await gather_hosts([self.s.ops.write_env_file(host, path, text) for host, path, text in texts])
        if errors:
            raise StepFailedError.wrap("env-files", errors, touched=False)

    async def _remove_env_files(self, step: RemoveEnvFiles) -> None:
        by_host: dict[str, list[str]] = {}
        for host, path in step.files:
            by_host.setdefault(host, []).append(path)
        errors = await gather_hosts([self.s.ops.remove_env_files(h, paths) for h, paths in by_host.items()])
        if errors:
            raise _NotDoneError("; ".join(str(e) for e in errors))

    async def _stop(self, step: StopContainers) -> None:
        errors = await gather_hosts([self.s.ops.stop_remove(c.host, c.name) for c in step.containers])
        if errors:
            raise StepFailedError.wrap("stop", errors, touched=True)

    async def _stop_old(self, step: StopContainers) -> None:
        try:
            await self._stop(step)
        except StepFailedError as exc:
            raise _NotDoneError(f"the old ranks did not all stop ({exc}); the next resync stops them") from exc

    async def _watch(self, step: Watch) -> None:
        if step.max_slowdown is not None and step.old_host:
            # Before the route moves: both specs run, each on its own Sparks, and are measured side by side.
            verdict = await pre_promotion(self.s.ops, step)
            self.timings.update(verdict.to_timings())
            self.s.progress(ProgressEvent(self.lp.lane, "pre-promotion", "info", verdict.why))
            if not verdict.ok:
                raise StepFailedError.wrap("pre-promotion", [NotReadyError(verdict.why)], touched=False)
        self.watched = step
        self._record(Progressed(phase=Phase.WATCHING, candidate=Gate(step.host, step.port, step.served_model)))
        figures = await watch(self.s.ops, step, self.health, self.s.routes, self.lp.lane, self.s.progress)
        if figures is not None:
            self.timings["watch_requests"] = float(figures.successes + figures.failures)
            self.timings["watch_failures"] = float(figures.failures)

    async def _drop(self, step: DropCaches) -> None:
        await gather_hosts([self.s.ops.drop_caches(h) for h in step.hosts])

    async def _gpu_free(self, step: WaitGpuFree) -> None:
        timeout = self.s.config.gpu_free_timeout_s
        asks = (self.s.ops.wait_gpu_free(h, timeout) for h in step.hosts)
        waits = await asyncio.gather(*asks, return_exceptions=True)
        errors = [w for w in waits if isinstance(w, BaseException)]
        if errors:
            raise StepFailedError.wrap("gpu-free", errors, touched=self.touched)
        self.timings["gpu_wait"] = round(max((w for w in waits if isinstance(w, float)), default=0.0), 3)

    async def _start(self, step: StartRanks) -> None:
        stamps: list[float] = []

        async def one(host: str, spec: ContainerSpec) -> None:
            await self.s.ops.start(host, spec)
            stamps.append(time.monotonic())
            self.started_ranks.append((host, spec))

        errors = await gather_hosts([one(h, s) for h, s in step.ranks])
        if stamps:
            skew = max(stamps) - min(stamps)
            self.timings["start_skew"] = round(max(self.timings.get("start_skew", 0.0), skew), 3)
        if errors:
            raise StepFailedError.wrap("start", errors, touched=True)

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

    def _repairing(self, message: str) -> str:
        """A failed repair's message with what it repaired: the record's drift names repairs that passed only."""
        if not self.drift:
            return message
        return f"repairing {'; '.join(d.describe() for d in self.drift)}: {message}"

    def _record(self, *events: Event) -> None:
        """Events of this lane's transaction, handed to the one writer of lane state."""
        record(self.s.store, self.lp.lane, *events)

    def _end(
        self,
        result: Result,
        *events: Event,
        logs: dict[str, str] | None = None,
        timings: dict[str, float] | None = None,
        drift: dict[str, Any] | None = None,
    ) -> str | None:
        """How a transaction ends: its apply row, then the lane's state after `events`; returns its last error.

        In that order, so whoever sees the state's ending (`lanes status`, a test) finds the row that explains
        it, and a crash between the two loses no history (the record is still 'progressing' and the next
        resync gates the lane again)."""

        def journal(state: LaneState) -> None:
            self._journal(result, state.error.message if state.error else None, logs)

        state, _effects = record(self.s.store, self.lp.lane, *events, timings=timings, drift=drift, journal=journal)
        return state.error.message if state.error else None

    def _gate_deadline(self) -> float:
        """When the readiness gate gives up at the latest: its stages run one after another, each with its own
        timeout (reconciler.execute.readiness)."""
        h = self.health
        return time.time() + h.port_timeout_s + h.ready_timeout_s + h.models_timeout_s + h.completion_timeout_s

    def _journal(self, result: Result, error: str | None, logs: dict[str, str] | None = None) -> None:
        """The apply row (before the record: see `_end`)."""
        lp = self.lp
        drift = [d.to_json() for d in self.drift] or None
        self.s.store.record_apply(
            self.run, lp.lane, lp.commit, lp.fingerprint, result.value, error, self.started, self.timings, logs,
            cause=lp.cause.value, drift=drift,
        )  # fmt: skip

    def _result(
        self, result: Result, error: str | None = None, cause: Cause | None = None, logs: dict[str, str] | None = None
    ) -> LaneResult:
        action = self.lp.action
        return LaneResult(self.lp.lane, action, result, error, self.timings, logs or {}, cause or self.lp.cause)
