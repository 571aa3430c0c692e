"""Putting a lane back: keep each rank's last log lines, stop the new ranks, restart the last healthy spec.

Split from the transaction itself so each stays one concept: `Executor` moves a lane forward, this
mixin moves it back after a failed readiness gate, an error after ranks were stopped, or a shutdown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from reconciler.engines import ContainerSpec
from reconciler.errors import LanesError
from reconciler.execute.hostops import HostOps, gather_hosts
from reconciler.execute.readiness import wait_ready
from reconciler.execute.results import ExecutorConfig, LaneResult, ProgressEvent, ProgressFn, StepFailedError
from reconciler.execute.specjson import spec_from_json
from reconciler.plan.steps import LanePlan
from reconciler.spec.lane import Health
from reconciler.store.journal import Store


class RollbackMixin:
    ops: HostOps
    store: Store
    config: ExecutorConfig
    progress: ProgressFn

    async def _rollback(
        self,
        run: str,
        lp: LanePlan,
        started_ranks: list[tuple[str, ContainerSpec]],
        message: str,
        health: Health,
        started: float,
        timings: dict[str, float],
        *,
        wait: bool = True,
    ) -> LaneResult:
        self.progress(ProgressEvent(lp.lane, "rollback", "started", message))
        step_id = self.store.step_started(run, lp.lane, lp.commit, 1000, "rollback", {"error": message})
        tails = await asyncio.gather(*(self.ops.logs(h, s.name, self.config.log_tail) for h, s in lp.specs))
        logs = {f"{spec.name}@{host}": tail for (host, spec), tail in zip(lp.specs, tails, strict=True)}
        await gather_hosts([self.ops.stop_remove(h, s.name) for h, s in lp.specs])
        rec = self.store.lane(lp.lane)
        previous = [spec_from_json(d) for d in (rec.healthy_specs if rec else [])]
        restored_ok = False
        restore_error = ""
        if previous and (rec is None or rec.fingerprint != lp.fingerprint or rec.healthy_commit != lp.commit):
            try:
                errors = await gather_hosts([self.ops.start(h, s) for h, s in previous])
                if errors:
                    raise StepFailedError("restore", "; ".join(map(str, errors)), touched=True)
                if wait:
                    head_host, head = previous[0]
                    address = self.ops.targets[head_host].address
                    port = int(dict(head.labels).get("lanes.port", "8000"))
                    gate = await wait_ready(address, port, _served_name(head), health)
                    restored_ok = gate.ok
                    restore_error = gate.error or ""
                else:
                    restored_ok, restore_error = True, ""
            except (LanesError, StepFailedError, OSError) as exc:
                restore_error = str(exc)
        self.store.step_finished(step_id, error=None if restored_ok else (restore_error or "no previous spec"))
        if restored_ok and not wait:
            health_now, result = "progressing", "rolled-back"
            error = f"{message}; previous spec restarted, its readiness is checked on the next cycle"
            self.store.update_lane(
                lp.lane, health=health_now, last_error=error, fingerprint=rec.fingerprint if rec else None
            )
            self.store.record_apply(run, lp.lane, lp.commit, lp.fingerprint, result, error, started, timings, logs)
            return LaneResult(lp.lane, "deploy", result, error, timings, logs)
        if restored_ok:
            health_now, result = "degraded", "rolled-back"
            error = f"{message}; rolled back to {rec.healthy_commit[:12] if rec and rec.healthy_commit else 'previous'}"
        else:
            health_now, result = "failed", "failed"
            error = message + (f"; restoring the previous spec failed: {restore_error}" if previous else "")
        self.store.update_lane(
            lp.lane,
            health=health_now,
            last_error=error,
            failed_fingerprint=lp.fingerprint,
            fingerprint=rec.fingerprint if (rec and restored_ok) else None,
        )
        self.store.record_apply(run, lp.lane, lp.commit, lp.fingerprint, result, error, started, timings, logs)
        self.progress(ProgressEvent(lp.lane, "rollback", "done" if restored_ok else "failed", error))
        return LaneResult(lp.lane, "deploy", result, error, timings, logs)


def _served_name(spec: ContainerSpec) -> str:
    labels: Mapping[str, str] = dict(spec.labels)
    if "lanes.served-model" in labels:
        return labels["lanes.served-model"]
    command = list(spec.command)
    if "--served-model-name" in command:
        return command[command.index("--served-model-name") + 1]
    return labels.get("lanes.lane", "")
