"""How what a cycle's probe saw of a lane differs from what should run: per-rank drift, the cause it makes
and the sentence for people; and whether the lane's hosts answer and are free of other owners' leases.

Shared by the planner (`reconciler.plan.planner`) and the repair of a held lane's healthy spec
(`reconciler.plan.repair`).
"""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.engines import ContainerSpec
from reconciler.facts.labels import LABEL_PORT
from reconciler.facts.observed import ObservedContainer, ObservedFleet
from reconciler.plan.steps import Cause, Drift, DriftKind, HostContainer
from reconciler.spec.lane import Lane


def lease_holder(involved: tuple[str, ...], observed: ObservedFleet, owner: str, now: float | None) -> str | None:
    """Who holds a lease on one of `involved` other than `owner`, said for a person; None when none does.
    `now`: the clock for lease expiry; None takes each probe's own time."""
    for host in involved:
        lease = observed.hosts[host].lease
        at = now if now is not None else (observed.hosts[host].probed_at or 0.0)
        if lease is not None and lease.held_by_other(owner, at):
            return f"{host} is leased by {lease.owner} until {lease.expires:.0f}"
    return None


def reachable(observed: ObservedFleet, host: str) -> bool:
    h = observed.host(host)
    return h is not None and h.reachable


def runs_desired(specs: Sequence[tuple[str, ContainerSpec]], current: list[tuple[str, ObservedContainer]]) -> bool:
    want = {(host, spec.name, spec.spec_hash) for host, spec in specs}
    have = {(host, c.name, c.spec_hash) for host, c in current if c.running}
    return want == have and len(current) == len(specs)


def find_squatters(lane: Lane, observed: ObservedFleet) -> tuple[HostContainer, ...]:
    out: list[HostContainer] = []
    for host in lane.hosts:
        h = observed.hosts[host]
        if lane.port not in h.listening:
            continue
        owned = any(c.running and c.labels.get(LABEL_PORT) == str(lane.port) for c in h.containers)
        if not owned:
            out.extend(HostContainer(host, u.name) for u in h.unmanaged if u.state == "running")
    return tuple(out)


def drift_of(
    specs: Sequence[tuple[str, ContainerSpec]],
    current: list[tuple[str, ObservedContainer]],
    squatters: tuple[HostContainer, ...],
    port: int,
) -> tuple[Drift, ...]:
    """Every difference between what runs and the desired ranks, rank by rank."""
    have = {(host, c.name): c for host, c in current}
    out: list[Drift] = []
    for host, spec in specs:
        c = have.get((host, spec.name))
        if c is None:
            out.append(Drift(DriftKind.MISSING, host, spec.name))
        elif c.spec_hash != spec.spec_hash:
            if c.image != spec.image:
                out.append(Drift(DriftKind.OTHER_IMAGE, host, spec.name, f"{c.image}, want {spec.image}"))
            else:
                out.append(Drift(DriftKind.OTHER_SPEC, host, spec.name, f"spec {c.spec_hash}, want {spec.spec_hash}"))
        elif not c.running:
            exit_code = f", exit code {c.exit_code}" if c.exit_code is not None else ""
            out.append(Drift(DriftKind.STOPPED, host, spec.name, f"{c.state}{exit_code}"))
    wanted = {(h, s.name) for h, s in specs}
    out.extend(Drift(DriftKind.UNWANTED, h, c.name) for h, c in current if (h, c.name) not in wanted)
    out.extend(Drift(DriftKind.UNMANAGED_ON_PORT, sq.host, sq.name, str(port)) for sq in squatters)
    return tuple(out)


def drift_reason(cause: Cause, drift: tuple[Drift, ...]) -> str:
    if cause == Cause.FIRST_DEPLOY:
        return "not running: first deploy"
    if cause == Cause.SPEC_CHANGED:
        # Every rank differs the same way after a commit: one is said, the count gives the rest.
        more = f" (and {len(drift) - 1} more rank(s))" if len(drift) > 1 else ""
        return f"the spec changed: {drift[0].describe()}{more}"
    return "; ".join(d.describe() for d in drift)


def change_cause(current: list[tuple[str, ObservedContainer]], drift: tuple[Drift, ...], *, was_ready: bool) -> Cause:
    """A first deploy, a changed spec (every difference is another spec or image), or drift to repair.

    `was_ready`: a gate once saw the lane serve (its record keeps the fingerprint). Every rank of such a lane
    gone is drift (each named missing), not a first deploy."""
    if not current and not was_ready:
        return Cause.FIRST_DEPLOY
    if drift and all(d.kind in {DriftKind.OTHER_SPEC, DriftKind.OTHER_IMAGE} for d in drift):
        return Cause.SPEC_CHANGED
    return Cause.DRIFT
