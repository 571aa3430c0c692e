"""A fleet as the planner sees it, without hosts: observed hosts built from the desired state, and planning
as the daemon would. Shared by the planner's table tests (tests/plan) and whatever else plans."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from reconciler.facts.observed import (
    Lease,
    ModelPresence,
    ObservedContainer,
    ObservedFleet,
    ObservedHost,
    UnmanagedContainer,
)
from reconciler.plan import LanePlan, Plan, PlanOptions, fingerprint, plan_fleet
from reconciler.policy import evaluate
from reconciler.spec.load import DesiredState
from tests.support.example import example_policies

NEW_IMAGE = "aidendle94/sparkrun-sglang-dsv41-gb10@sha256:" + "ab" * 32


def host(
    name: str,
    desired: DesiredState,
    containers: Iterable[ObservedContainer] = (),
    *,
    listening: Iterable[int] = (),
    unmanaged: Iterable[UnmanagedContainer] = (),
    lease: Lease | None = None,
    missing_models: Iterable[str] = (),
) -> ObservedHost:
    paths = {m.path for m in desired.models.values()}
    models = {p: ModelPresence(p not in set(missing_models), 1 << 30) for p in paths}
    return ObservedHost(
        host=name,
        reachable=True,
        error=None,
        containers=tuple(containers),
        unmanaged=tuple(unmanaged),
        listening=frozenset(listening),
        memory=None,
        disk_free=None,
        disk_total=None,
        models=models,
        lease=lease,
        probe_errors=(),
        probed_at=1000.0,
    )


def empty_fleet(desired: DesiredState, **overrides: ObservedHost) -> ObservedFleet:
    hosts = {name: host(name, desired) for name in desired.hosts}
    hosts.update(overrides)
    return ObservedFleet(hosts)


def applied_fleet(desired: DesiredState, result: Plan, state: str = "running") -> ObservedFleet:
    """What the hosts look like once `result` was applied: every rank running its spec."""
    per_host: dict[str, list[ObservedContainer]] = {name: [] for name in desired.hosts}
    for lp in result.lanes:
        if lp.action in {"deploy", "noop"}:
            for h, spec in lp.specs:
                per_host[h].append(
                    ObservedContainer(spec.name, "id-" + spec.name, spec.image, "sha256:x", state, 0, dict(spec.labels))
                )
    listening: Mapping[str, set[int]] = {
        h: {int(dict(c.labels)["lanes.port"]) for c in cs if c.running} for h, cs in per_host.items()
    }
    return ObservedFleet({h: host(h, desired, cs, listening=listening[h]) for h, cs in per_host.items()})


def run(desired: DesiredState, observed: ObservedFleet, **options: object) -> Plan:
    """Plan as the daemon would once every lane's current spec has passed its gate (unless `ready` is given)."""
    verdict = evaluate(desired, example_policies())
    options.setdefault("ready", {name: fingerprint(specs) for name, specs in verdict.rendered.items()})
    return plan_fleet(desired, observed, verdict, PlanOptions(owner="me", **options))  # type: ignore[arg-type]


def converge(desired: DesiredState) -> tuple[Plan, ObservedFleet]:
    first = run(desired, empty_fleet(desired))
    return first, applied_fleet(desired, first)


def lane_of(result: Plan, name: str) -> LanePlan:
    lp = result.lane(name)
    assert lp is not None
    return lp
