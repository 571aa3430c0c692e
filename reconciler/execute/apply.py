"""Apply a plan: each lane is a transaction with a health gate and a rollback.

lease -> pull (digest verified) -> env files -> stop old ranks -> (drop
caches) -> start ranks in the engine's order -> readiness gate -> record.
Everything that can fail without touching running ranks (leases, pulls,
secrets) happens before the old ranks stop, so such a failure leaves the old
lane serving. After that, a failure keeps each rank's last log lines, stops
the new ranks and restores the last healthy specs. Lanes are independent:
they run concurrently and one failing never blocks another.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from functools import partial

from reconciler.cancel import cancel_requested
from reconciler.engines import ContainerSpec
from reconciler.errors import LanesError
from reconciler.execute.hostops import HostOps, gather_hosts
from reconciler.execute.leases import LeaseBlockedError, LeaseMixin
from reconciler.execute.readiness import GateResult, wait_ready
from reconciler.execute.results import (
    ExecutorConfig,
    LaneResult,
    ProgressEvent,
    ProgressFn,
    StepFailedError,
)
from reconciler.execute.rollback import RollbackMixin
from reconciler.execute.secrets import SecretStore, env_file_text
from reconciler.execute.specjson import spec_to_json
from reconciler.plan.planner import FAILED_BEFORE
from reconciler.plan.steps import (
    AcquireLeases,
    DropCaches,
    LanePlan,
    Plan,
    PullImages,
    StartRanks,
    Step,
    StopContainers,
    WaitReady,
    WriteEnvFiles,
)
from reconciler.spec.lane import Health
from reconciler.spec.load import DesiredState
from reconciler.store.journal import LaneRecord, Store


class Executor(RollbackMixin, LeaseMixin):
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
        self._renewals: dict[str, asyncio.Task[None]] = {}

    async def apply(self, plan: Plan, desired: DesiredState, lease_file: str) -> list[LaneResult]:
        # Stops go first (a deploy may need the hosts they free), then the rest concurrently.
        stops = [lp for lp in plan.lanes if lp.action == "stop"]
        rest = [lp for lp in plan.lanes if lp.action != "stop"]
        try:
            results = [await self._one(lp, desired, lease_file) for lp in stops]
            results += await asyncio.gather(*(self._one(lp, desired, lease_file) for lp in rest))
        finally:
            await self._stop_renewals()  # every path releases its leases; this only guards against leaks
        return results

    async def _one(self, lp: LanePlan, desired: DesiredState, lease_file: str) -> LaneResult:
        lane = desired.lanes.get(lp.lane)
        if lp.action in {"noop", "denied", "blocked", "fail"}:
            return self._record_inactive(lp, desired)
        hosts = sorted({h for step in lp.steps if isinstance(step, AcquireLeases) for h in step.hosts})
        locks = [self._host_locks.setdefault(h, asyncio.Lock()) for h in hosts]
        for lock in locks:  # sorted order: no deadlock between lanes sharing hosts
            await lock.acquire()
        try:
            if lp.action == "stop":
                return await self._stop_lane(lp, lease_file)
            assert lane is not None
            return await self._deploy(lp, lane.health, lease_file)
        finally:
            for lock in reversed(locks):
                lock.release()

    def _record_inactive(self, lp: LanePlan, desired: DesiredState) -> LaneResult:
        lane = desired.lanes.get(lp.lane)
        if lane is None and lp.action == "noop":
            return LaneResult(lp.lane, lp.action, "noop")
        rec = self.store.lane(lp.lane)
        fields: dict[str, object] = {
            "desired": lane.desired if lane else "stopped",
            "desired_commit": lp.commit,
            "hosts": lp.hosts,
        }
        if lp.action == "noop":
            health = "healthy" if lane is not None and lane.running else "stopped"
            fields.update(health=health, fingerprint=lp.fingerprint)
            if health == "healthy":
                if rec is None or rec.health != "healthy" or not rec.healthy_specs:
                    fields["healthy_specs"] = [spec_to_json(h, s) for h, s in lp.specs]
                    fields["healthy_commit"] = lp.commit
                if rec is None or not rec.applied_commit or rec.fingerprint != lp.fingerprint:
                    fields["applied_commit"] = lp.commit
                fields["last_error"] = None
        elif lp.action == "denied":
            fields.update(health="denied", last_error=lp.reason)
        elif lp.action == "fail":
            # Refused at planning (a model path missing), before anything was stopped: as after a failed
            # pull, ranks that served still serve, only not the desired spec.
            served = rec is not None and rec.health in {"healthy", "degraded"}
            fields.update(health="degraded" if served else "failed", last_error=lp.reason)
        else:  # blocked: keep the health it had, say why
            fields.update(last_error=_blocked_reason(lp, rec.last_error if rec else None))
            if rec is None:
                fields["health"] = "degraded" if "unreachable" in lp.reason else "progressing"
            elif "unreachable" in lp.reason and rec.health == "healthy":
                fields["health"] = "degraded"
        self.store.update_lane(lp.lane, **fields)
        error = None if lp.action == "noop" else lp.reason
        return LaneResult(lp.lane, lp.action, lp.action if lp.action != "fail" else "failed", error)

    async def _run_step(
        self, run: str, lp: LanePlan, seq: int, step: Step, coro_fn: Callable[[], Awaitable[None]]
    ) -> None:
        step_id = self.store.step_started(run, lp.lane, lp.commit, seq, step.kind, {"describe": step.describe()})
        self.progress(ProgressEvent(lp.lane, step.kind, "started", step.describe()))
        try:
            await coro_fn()
        except BaseException as exc:
            self.store.step_finished(step_id, error=str(exc) or type(exc).__name__)
            self.progress(ProgressEvent(lp.lane, step.kind, "failed", str(exc)))
            raise
        self.store.step_finished(step_id)
        self.progress(ProgressEvent(lp.lane, step.kind, "done", step.describe()))

    async def _stop_lane(self, lp: LanePlan, lease_file: str) -> LaneResult:
        run = self.store.new_run()
        started = time.time()
        leased: list[str] = []
        try:
            for seq, step in enumerate(lp.steps):
                if isinstance(step, AcquireLeases):
                    lease = partial(self._lease, step.hosts, lease_file, leased, lp.lane)
                    await self._run_step(run, lp, seq, step, lease)
                elif isinstance(step, StopContainers):
                    await self._run_step(run, lp, seq, step, partial(self._stop, step))
        except LeaseBlockedError as exc:
            return await self._lease_blocked(lp, exc, self.store.lane(lp.lane), leased, lease_file)
        except (LanesError, StepFailedError) as exc:
            self.store.update_lane(lp.lane, last_error=str(exc), desired_commit=lp.commit)
            self.store.record_apply(run, lp.lane, lp.commit, None, "failed", str(exc), started, {})
            return LaneResult(lp.lane, "stop", "failed", str(exc))
        finally:
            await self._release(leased, lease_file)
        self.store.update_lane(
            lp.lane,
            health="stopped",
            desired="stopped",
            desired_commit=lp.commit,
            applied_commit=lp.commit,
            last_error=None,
            fingerprint=None,
        )
        self.store.record_apply(run, lp.lane, lp.commit, None, "stopped", None, started, {})
        return LaneResult(lp.lane, "stop", "stopped")

    async def _interrupted(
        self,
        run: str,
        lp: LanePlan,
        started_ranks: list[tuple[str, ContainerSpec]],
        health: Health,
        started: float,
        timings: dict[str, float],
        before: LaneRecord | None,
        touched: bool,
    ) -> None:
        """Shutdown (SIGTERM) in the middle of a transaction: put the last healthy spec back without
        waiting for it to load (that can take longer than the stop timeout); the caller lets the cancel go on."""
        if touched:
            await self._rollback(
                run, lp, started_ranks, "interrupted by shutdown", health, started, timings, wait=False
            )
        else:
            self.store.update_lane(
                lp.lane,
                last_error="interrupted by shutdown before any rank was stopped",
                health=before.health if before else "progressing",
            )

    async def _stop(self, step: StopContainers) -> None:
        errors = await gather_hosts([self.ops.stop_remove(c.host, c.name) for c in step.containers])
        if errors:
            raise StepFailedError("stop", "; ".join(map(str, errors)), touched=True)

    async def _deploy(self, lp: LanePlan, health: Health, lease_file: str) -> LaneResult:
        run = self.store.new_run()
        started = time.time()
        t0 = time.monotonic()
        leased: list[str] = []
        started_ranks: list[tuple[str, ContainerSpec]] = []
        timings: dict[str, float] = {}
        touched = False
        before = self.store.lane(lp.lane)
        self.store.update_lane(
            lp.lane, health="progressing", desired="running", desired_commit=lp.commit, hosts=lp.hosts
        )
        try:
            for seq, step in enumerate(lp.steps):
                if isinstance(step, AcquireLeases):
                    lease = partial(self._lease, step.hosts, lease_file, leased, lp.lane)
                    await self._run_step(run, lp, seq, step, lease)
                elif isinstance(step, PullImages):
                    await self._run_step(run, lp, seq, step, partial(self._pull, step))
                elif isinstance(step, WriteEnvFiles):
                    await self._run_step(run, lp, seq, step, partial(self._env_files, step))
                elif isinstance(step, StopContainers):
                    touched = True
                    await self._run_step(run, lp, seq, step, partial(self._stop, step))
                elif isinstance(step, DropCaches):
                    await self._run_step(run, lp, seq, step, partial(self._drop, step))
                elif isinstance(step, StartRanks):
                    touched = True
                    await self._run_step(run, lp, seq, step, partial(self._start, step, started_ranks, timings, t0))
                elif isinstance(step, WaitReady):
                    await self._run_step(
                        run, lp, seq, step, partial(self._gate, step, health, started_ranks, timings, t0)
                    )
        except LeaseBlockedError as exc:
            return await self._lease_blocked(lp, exc, before, leased, lease_file)
        except (LanesError, StepFailedError, OSError) as exc:
            if cancel_requested():
                # A library turned the shutdown's cancel into an error (see reconciler.cancel): still a shutdown.
                await self._interrupted(run, lp, started_ranks, health, started, timings, before, touched)
                await self._release(leased, lease_file)
                raise asyncio.CancelledError from exc
            message = str(exc)
            if not touched:
                # Nothing stopped yet: old ranks that served still serve, but not the desired spec.
                served = before is not None and before.health in {"healthy", "degraded"}
                self.store.update_lane(lp.lane, last_error=message, health="degraded" if served else "failed")
                self.store.record_apply(run, lp.lane, lp.commit, lp.fingerprint, "failed", message, started, timings)
                await self._release(leased, lease_file)
                return LaneResult(lp.lane, "deploy", "failed", message, timings)
            result = await self._rollback(run, lp, started_ranks, message, health, started, timings)
            await self._release(leased, lease_file)
            return result
        except asyncio.CancelledError:
            await self._interrupted(run, lp, started_ranks, health, started, timings, before, touched)
            await self._release(leased, lease_file)
            raise
        await self._release(leased, lease_file)
        timings["total"] = round(time.monotonic() - t0, 3)
        self.store.update_lane(
            lp.lane,
            health="healthy",
            applied_commit=lp.commit,
            fingerprint=lp.fingerprint,
            last_error=None,
            failed_fingerprint=None,
            healthy_specs=[spec_to_json(h, s) for h, s in lp.specs],
            healthy_commit=lp.commit,
            timings=timings,
        )
        self.store.record_apply(run, lp.lane, lp.commit, lp.fingerprint, "applied", None, started, timings)
        return LaneResult(lp.lane, "deploy", "applied", None, timings)

    async def _pull(self, step: PullImages) -> None:
        errors = await gather_hosts([self.ops.pull(h, image) for h, image in step.pulls])
        if errors:
            raise StepFailedError("pull", "; ".join(map(str, errors)), touched=False)

    async def _env_files(self, step: WriteEnvFiles) -> None:
        texts = [
            (host, path, env_file_text([(env, self.secrets.get(name)) for env, name in pairs]))
            for host, path, pairs in step.files
        ]
        errors = await gather_hosts([self.ops.write_env_file(host, path, text) for host, path, text in texts])
        if errors:
            raise StepFailedError("env-files", "; ".join(map(str, errors)), touched=False)

    async def _drop(self, step: DropCaches) -> None:
        await gather_hosts([self.ops.drop_caches(h) for h in step.hosts])

    async def _start(
        self, step: StartRanks, started_ranks: list[tuple[str, ContainerSpec]], timings: dict[str, float], t0: float
    ) -> None:
        stamps: list[float] = []

        async def one(host: str, spec: ContainerSpec) -> None:
            await self.ops.start(host, spec)
            stamps.append(time.monotonic())
            started_ranks.append((host, spec))

        errors = await gather_hosts([one(h, s) for h, s in step.ranks])
        if stamps:
            skew = max(stamps) - min(stamps)
            timings["start_skew"] = round(max(timings.get("start_skew", 0.0), skew), 3)
        if errors:
            raise StepFailedError("start", "; ".join(map(str, errors)), touched=True)

    async def _gate(
        self,
        step: WaitReady,
        health: Health,
        ranks: list[tuple[str, ContainerSpec]],
        timings: dict[str, float],
        t0: float,
    ) -> None:
        died = asyncio.Event()
        dead: list[str] = []

        async def watch() -> None:
            misses: dict[str, int] = {}
            while True:
                await asyncio.sleep(self.config.watch_interval_s)
                states = await asyncio.gather(*(self.ops.state(h, s.name) for h, s in ranks), return_exceptions=True)
                for (host, spec), state in zip(ranks, states, strict=True):
                    if isinstance(state, str) and state not in {"running", "created"}:
                        dead.append(f"{spec.name}@{host} is {state}")
                    elif isinstance(state, LanesError):
                        # A rank whose host stops answering is as gone as a rank that exited.
                        misses[host] = misses.get(host, 0) + 1
                        if misses[host] >= 2:
                            dead.append(f"{spec.name}@{host} unreachable: {state}")
                    else:
                        misses.pop(host, None)
                if dead:
                    died.set()
                    return

        watcher = asyncio.create_task(watch())
        try:
            gate: GateResult = await wait_ready(
                self.ops.targets[step.host].address, step.port, step.served_model, health, started=t0, died=died
            )
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, LanesError):
                await watcher
        timings.update({f"to_{k}" if k != "startup_ttft" else k: v for k, v in gate.timings.items()})
        if not gate.ok:
            why = f"{gate.error}" + (f" ({'; '.join(dead)})" if dead else "")
            raise StepFailedError("wait-ready", f"readiness gate failed at stage '{gate.stage}': {why}", touched=True)
        # The head can serve a token while another rank is already gone (its host rebooted or was cut
        # off between two looks of the watcher): the lane is ready only if every rank still runs.
        gone = await self._ranks_gone(ranks)
        if gone:
            raise StepFailedError(
                "wait-ready", f"the head became ready but not every rank runs: {'; '.join(gone)}", touched=True
            )

    async def _ranks_gone(self, ranks: list[tuple[str, ContainerSpec]]) -> list[str]:
        """Ranks that are not running; a host that does not answer gets a second look, as in the watch."""
        gone: list[str] = []
        pending = list(ranks)
        for attempt in (1, 2):
            states = await asyncio.gather(*(self.ops.state(h, s.name) for h, s in pending), return_exceptions=True)
            retry: list[tuple[str, ContainerSpec]] = []
            for (host, spec), state in zip(pending, states, strict=True):
                if isinstance(state, LanesError):
                    if attempt == 1:
                        retry.append((host, spec))
                    else:
                        gone.append(f"{spec.name}@{host} unreachable: {state}")
                elif isinstance(state, BaseException):
                    raise state
                elif state not in {"running", "created"}:
                    gone.append(f"{spec.name}@{host} is {state}")
            if not retry:
                break
            pending = retry
            await asyncio.sleep(self.config.watch_interval_s)
        return gone


def _blocked_reason(lp: LanePlan, previous: str | None) -> str:
    """Why a lane is blocked; for a spec held back after it failed, keep what it failed with in view."""
    if not lp.fingerprint or FAILED_BEFORE not in lp.reason or not previous:
        return lp.reason
    if FAILED_BEFORE in previous:
        return previous  # already says both
    return f"{lp.reason} (it failed with: {previous})"


__all__ = ["Executor", "ExecutorConfig", "LaneResult", "ProgressEvent", "ProgressFn", "StepFailedError"]
