"""The repair of what serves in place of a failed spec held back: its drift is not hidden by the hold.

A lane whose new spec failed its gate was rolled back to the spec that last passed it; while the failed
spec is condemned (or waits out a backoff), that healthy spec serves. A rank of it that exits or is removed
is drift like any other: it is put back as it was and gated where it passed before, never the held spec.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from reconciler.facts.observed import ObservedContainer, ObservedFleet
from reconciler.plan.lanediff import drift_of, drift_reason, lease_holder, reachable
from reconciler.plan.steps import (
    AcquireLeases,
    Cause,
    HostContainer,
    LanePlan,
    Serving,
    StartRanks,
    Step,
    StopContainers,
    WaitGpuFree,
)
from reconciler.plan.windows import hold_for, restarts_running
from reconciler.spec.lane import Lane
from reconciler.spec.load import DesiredState

if TYPE_CHECKING:
    from reconciler.plan.planner import PlanOptions


def repair_serving(
    held: LanePlan,
    lane: Lane,
    current: list[tuple[str, ObservedContainer]],
    observed: ObservedFleet,
    desired: DesiredState,
    opts: PlanOptions,
    serving: Serving | None,
) -> LanePlan | None:
    """A failed spec held back hides nothing of what serves in its place: the last healthy spec, drifted
    (a rank removed, exited, replaced), is put back as it was and gated where it passed before. Never the
    held spec: that waits for a change, `lanes retry` or its retry. None: nothing to repair now (no healthy
    spec serves, it runs as recorded, a host is out of reach or leased, a change window is closed)."""
    if serving is None or serving.fingerprint == held.fingerprint or not serving.specs:
        return None
    hosts = tuple(dict.fromkeys(h for h, _ in serving.specs))
    involved = tuple(dict.fromkeys([*hosts, *(h for h, _ in current)]))
    if (
        not all(reachable(observed, h) for h in involved)
        or lease_holder(involved, observed, opts.owner, opts.now) is not None
    ):
        return None
    drift = drift_of(serving.specs, current, (), serving.gate.port)
    if not drift:
        return None
    if not opts.window_override and restarts_running(current, drift):
        at = opts.window_clock if opts.window_clock is not None else opts.clock
        if hold_for(lane, desired, opts.windows, at) is not None:
            return None  # a repair restarts what runs, as any drift repair: it waits for the window too
    what = drift_reason(Cause.DRIFT, drift)
    at_commit = f", commit {serving.commit[:12]}" if serving.commit else ""
    reason = (
        f"the last healthy spec ({serving.fingerprint}{at_commit}), serving in place of the held one, drifted: "
        f"{what}; it is put back as it was. {held.reason}"
    )
    steps: list[Step] = [AcquireLeases(involved)]
    old = tuple(HostContainer(host, c.name) for host, c in current)
    if old:
        steps.append(StopContainers(old, f"redeployed: {what}"))
    # As a rollback restores it (`reconciler.execute.rollback.restart_healthy`): its images are on the hosts
    # already and its env files were kept; every rank starts at once, then the gate it passed before.
    steps += [WaitGpuFree(hosts), StartRanks(serving.specs), serving.gate]
    return replace(
        held,
        action="deploy",
        reason=reason,
        steps=tuple(steps),
        fingerprint=serving.fingerprint,
        specs=serving.specs,
        cause=Cause.RESTORED_DRIFT,
        drift=drift,
    )
