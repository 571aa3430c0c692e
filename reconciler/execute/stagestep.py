"""The lane transaction's `stage` step: the model's files on every rank host, checked, before anything stops.

The plan carries what to stage (`StageModel`: the model's folder, its manifest, its origin); this resolves
where the hosts answer (the cycle's SSH targets, origins included), runs `staging.stage` with the
reconciler's own key and pinned known_hosts, and says how far it got: a progress event per receiver
(bytes, rate, time left) for the CLI and the log, and the lane's `staging` record for `lanes status`,
the daemon's `/status` and `/metrics`, written at most once a second. A failure is a `StagingError`:
nothing was stopped, the lane keeps serving what it served.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from reconciler.execute.hostops import HostOps
from reconciler.execute.localorigin import LocalOrigins, checked_origin
from reconciler.execute.results import ExecutorConfig, ProgressEvent, ProgressFn
from reconciler.execute.stagetypes import CONTROL_NODE
from reconciler.execute.staging import StageHost, StageOrigin, StageProgress, StageReport, StagingError, stage
from reconciler.plan.steps import StageModel
from reconciler.store.journal import Store
from reconciler.store.lanewriter import note_staging

WRITE_EVERY_S = 1.0


def allowed_local(origin: StageOrigin, origins: LocalOrigins, step: StageModel) -> StageOrigin:
    """The control-node folder a commit names, checked against the operator's roots before anything reads it."""
    real, root = checked_origin(origin.path, origins, model=step.model, host=step.hosts[0])
    return StageOrigin.local(str(real), root=str(root))


def stage_hosts(step: StageModel, ops: HostOps) -> tuple[dict[str, StageHost], StageOrigin]:
    """The receivers and the origin of `step`, as the cycle's targets reach them."""
    data = dict(step.data_plane)

    def host(name: str, root: str) -> StageHost:
        target = ops.targets.get(name)
        if target is None:
            raise StagingError(f"no address for {name}: not a host or origin of the fleet", host=name, transient=False)
        return StageHost(name, target.address, root, target.port, target.user, data.get(name))

    receivers = {h: host(h, step.path) for h in step.hosts}
    name, folder, spark = step.origin
    if name is None:
        assert folder is not None  # the loader requires a path for a control-node origin
        origin = StageOrigin.local(folder)
    elif spark:
        origin = StageOrigin.from_spark(host(name, step.path))
    else:
        origin = StageOrigin.remote(host(name, folder or step.path), folder or step.path)
    return receivers, origin


class StageRecorder:
    """Progress of one staging: events for the CLI and log, the lane's record for status and metrics."""

    def __init__(self, store: Store, lane: str, model: str, progress: ProgressFn) -> None:
        self.store, self.lane, self.model, self.progress = store, lane, model, progress
        self.hosts: dict[str, dict[str, Any]] = {}
        self._written = 0.0

    def __call__(self, p: StageProgress) -> None:
        self.hosts[p.host] = {
            "done": p.bytes_done,
            "total": p.bytes_total,
            "rate_bps": round(p.rate_bps),
            "eta_s": None if p.eta_s is None else round(p.eta_s, 1),
            "phase": p.phase,
        }
        eta = "" if p.eta_s is None else f", {p.eta_s:.0f} s left"
        detail = f"{p.host}: {_gib(p.bytes_done)} of {_gib(p.bytes_total)} GiB, {p.rate_bps / 1e6:,.0f} MB/s{eta}"
        self.progress(ProgressEvent(self.lane, "stage", "info", detail))
        now = time.monotonic()
        if now - self._written >= WRITE_EVERY_S or p.bytes_done >= p.bytes_total:
            self._written = now
            note_staging(self.store, self.lane, {"model": self.model, "hosts": self.hosts})

    def done(self, report: StageReport | None) -> None:
        note_staging(self.store, self.lane, None)
        if report is None:
            return
        copied = {h: files for h, files in report.copied.items() if files}
        what = (
            "; ".join(f"{len(files)} file(s) to {h}" for h, files in sorted(copied.items()))
            if copied
            else "every host already held it"
        )
        sent = ", ".join(f"{s} sent {_gib(n)} GiB" for s, n in sorted(report.sent_by.items()) if n)
        detail = f"model {report.model} staged in {report.seconds:.1f} s: {what}" + (f" ({sent})" if sent else "")
        self.progress(ProgressEvent(self.lane, "stage", "info", detail))


async def run_stage(
    step: StageModel, ops: HostOps, config: ExecutorConfig, store: Store, lane: str, progress: ProgressFn
) -> StageReport:
    if config.ssh_key is None or config.known_hosts is None:
        raise StagingError(
            "staging needs the reconciler's SSH key and known_hosts file (not given to this run)",
            host=step.hosts[0],
            transient=False,
        )
    receivers, origin = stage_hosts(step, ops)
    if origin.name == CONTROL_NODE:
        origin = allowed_local(origin, config.origins, step)
    recorder = StageRecorder(store, lane, step.model, progress)
    report: StageReport | None = None
    try:
        report = await stage(
            receivers,
            step.model,
            step.manifest,
            origin,
            key=Path(config.ssh_key),
            known_hosts=Path(config.known_hosts),
            transport=ops.transport,
            parallel=config.stage_parallel,
            progress=recorder,
            lane=lane,
        )
        return report
    finally:
        recorder.done(report)


def _gib(n: int) -> str:
    return f"{n / (1 << 30):,.2f}"
