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

A routed lane's rollout (`reconciler.plan.rollout`) adds its own steps: a drain out of the gateway's route
before the old ranks stop; or, blue/green, the new ranks started and gated beside the old ones (which are not
touched), a pre-promotion benchmark and a watch window (`reconciler.execute.rolloutsteps`), and only then
the old ranks stopped. A blue/green failure before that moves the traffic back and stops the new ranks alone.
The endings (success, failure and rollback, shutdown, preemption) are `reconciler.execute.txendings`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from functools import partial

from reconciler.engines import ContainerSpec
from reconciler.errors import (
    ImageNeedsNewerDriverError,
    NotReadyError,
    PullFailedError,
    RemoteCommandError,
    StepFailedError,
)
from reconciler.execute.gate import gate
from reconciler.execute.hostops import gather_hosts
from reconciler.execute.leases import LeaseBlockedError
from reconciler.execute.results import LaneResult, ProgressEvent, Result
from reconciler.execute.rolloutsteps import drain, pre_promotion, watch
from reconciler.execute.secrets import env_file_text
from reconciler.execute.stagestep import run_stage
from reconciler.execute.txbase import Shared, StepNotDoneError
from reconciler.execute.txendings import TxEndings
from reconciler.facts.cudareq import REQUIRE_VAR, driver_gives, required_cuda
from reconciler.lane import (
    Gate,
    Phase,
    Progressed,
    Started,
    StepFailed,
    Stopped,
    TxKind,
    Wanted,
)
from reconciler.plan.steps import (
    AcquireLeases,
    Cause,
    Drain,
    DropCaches,
    PullImages,
    RemoveEnvFiles,
    StageModel,
    StartRanks,
    Step,
    StopContainers,
    WaitGpuFree,
    WaitReady,
    Watch,
    WriteEnvFiles,
)

__all__ = ["LaneTransaction", "Shared"]


class LaneTransaction(TxEndings):
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
        except StepNotDoneError as exc:
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
            raise StepNotDoneError("; ".join(str(e) for e in errors))

    async def _stop(self, step: StopContainers) -> None:
        errors = await gather_hosts([self.s.ops.stop_remove(c.host, c.name) for c in step.containers])
        if errors:
            raise StepFailedError.wrap("stop", errors, touched=True)

    async def _stop_old(self, step: StopContainers) -> None:
        try:
            await self._stop(step)
        except StepFailedError as exc:
            raise StepNotDoneError(f"the old ranks did not all stop ({exc}); the next resync stops them") from exc

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
