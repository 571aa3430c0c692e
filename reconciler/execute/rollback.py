"""Putting a lane back: keep each rank's last log lines, stop the new ranks, restart the last healthy spec.

Split from the transaction so each stays one concept: the transaction moves a lane forward, this
moves it back after a failed readiness gate, an error after ranks were stopped, or a shutdown. What a
restore needs (the specs, and where and how to gate them) was recorded when that spec passed its gate
(`healthy_specs`, `healthy_gate`), never re-read from container labels.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from reconciler.errors import LanesError, StepFailedError
from reconciler.execute.hostops import HostOps, gather_hosts
from reconciler.execute.readiness import wait_ready
from reconciler.lane import Serving
from reconciler.logsetup import redact
from reconciler.plan.specjson import spec_from_json
from reconciler.plan.steps import LanePlan
from reconciler.spec.lane import Health


@dataclass
class Restore:
    """What a rollback did: whether the last healthy spec serves again, and the failed ranks' logs."""

    ok: bool
    attempted: bool
    error: str = ""
    logs: dict[str, str] = field(default_factory=dict)
    healthy_commit: str | None = None
    fingerprint: str | None = None
    """The restored spec's fingerprint, when it serves again."""


async def put_back(
    ops: HostOps, lp: LanePlan, healthy: Serving | None, health: Health, log_tail: int, *, wait: bool = True
) -> Restore:
    """Keep the new ranks' last log lines, stop them, and start `healthy` in their place (None: nothing is
    restarted). What to put back is the lane machine's decision (`reconciler.lane.restore_target`, its
    `RestoreHealthy` effect), never this module's."""
    tails = await asyncio.gather(*(ops.logs(h, s.name, log_tail) for h, s in lp.specs))
    # Redacted here, before the tails reach the journal, the result and anything printed from them.
    logs = {f"{spec.name}@{host}": redact(tail) for (host, spec), tail in zip(lp.specs, tails, strict=True)}
    await gather_hosts([ops.stop_remove(h, s.name) for h, s in lp.specs])
    if healthy is None or not healthy.specs:
        return Restore(ok=False, attempted=False, error="no previous spec", logs=logs)
    return await restart_healthy(ops, healthy, health, logs=logs, wait=wait)


async def restart_healthy(
    ops: HostOps, healthy: Serving, health: Health, *, logs: dict[str, str] | None = None, wait: bool = True
) -> Restore:
    """Start the last healthy spec and, with `wait`, gate it where it passed its gate before."""
    previous = [spec_from_json(dict(d)) for d in healthy.specs]
    restore = Restore(ok=False, attempted=True, logs=logs or {}, healthy_commit=healthy.commit)
    try:
        errors = await gather_hosts([ops.start(h, s) for h, s in previous])
        if errors:
            raise StepFailedError.wrap("restore", errors, touched=True)
        where = healthy.gate
        if wait and where is not None:
            address = ops.targets[where.host].address
            result = await wait_ready(address, where.port, where.served_model, health)
            restore.ok, restore.error = result.ok, result.error or ""
        else:
            # A shutdown cannot wait for a model to load; a record from before gates were recorded
            # cannot say where to look: the spec is restarted and said to be so.
            restore.ok = True
    except (LanesError, OSError) as exc:
        restore.error = str(exc)
    if restore.ok:
        restore.fingerprint = healthy.fingerprint
    return restore
