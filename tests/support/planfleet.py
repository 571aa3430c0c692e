"""A fleet as the planner sees it, without hosts: observed hosts built from the desired state, and planning
as the daemon would. Shared by the planner's table tests (tests/plan) and whatever else plans."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from reconciler.engines import ContainerSpec
from reconciler.facts.hostinfo import HostInfo, RdmaDevice
from reconciler.facts.observed import (
    Lease,
    ModelPresence,
    ObservedContainer,
    ObservedFleet,
    ObservedHost,
    UnmanagedContainer,
)
from reconciler.lane import Backoff, Condemned, Gate, Hold, LaneHealth, LaneState, SuspendedBy, Wanted
from reconciler.lane import Serving as LaneServing
from reconciler.plan import LanePlan, Plan, PlanOptions, fingerprint, plan_fleet
from reconciler.plan.specjson import spec_to_json
from reconciler.plan.steps import Serving
from reconciler.policy import evaluate
from reconciler.spec import Host
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
    spec = desired.hosts.get(name)
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
        info=rdma_info(spec) if spec is not None else None,
    )


def probed(desired: DesiredState) -> dict[str, HostInfo]:
    """What a probe of every healthy host reads (`host`'s info): what a cycle renders the lanes with."""
    return {name: rdma_info(spec) for name, spec in desired.hosts.items()}


def rdma_info(spec: Host, gid_index: int = 3) -> HostInfo:
    """What a probe reads of a healthy host's RoCE devices: each data-plane port's HCA active, backed by its
    interface, with a RoCE v2 GID for its address (what `host_env`'s roce_gid_index is read from)."""
    devices = tuple(
        RdmaDevice(p.hca, (p.interface,), "4: ACTIVE", {p.ip: gid_index}) for p in spec.data_plane if p.hca is not None
    )
    return HostInfo(rdma=devices)


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


def run(
    desired: DesiredState,
    observed: ObservedFleet,
    *,
    ready: Mapping[str, Any] | None = None,
    failed: Mapping[str, Any] | None = None,
    retry_at: Mapping[str, tuple[Any, float]] | None = None,
    swapped: Iterable[str] = (),
    serving: Mapping[str, Serving] | None = None,
    lanes: Mapping[str, LaneState] | None = None,
    suspended: Mapping[str, SuspendedBy] | None = None,
    **options: Any,
) -> Plan:
    """Plan as the daemon would once every lane's current spec has passed its gate (unless `ready` is given).

    The lanes' states are said as what a test is about: the spec last seen `ready`, the spec `failed`
    (condemned), a backoff until `retry_at`, the lanes whose failure undid a swap (`swapped`), the spec that
    `serving` in place of a failed one, a person's hold (`suspended`); `lanes` gives whole states, which win
    over all of these."""
    verdict = evaluate(desired, example_policies(), host_info=observed.host_info())  # as a cycle renders
    if ready is None:
        ready = {name: fingerprint(specs) for name, specs in verdict.rendered.items()}
    states = lane_states(ready, failed or {}, retry_at or {}, frozenset(swapped), serving or {}, suspended or {})
    states.update(lanes or {})
    return plan_fleet(desired, observed, verdict, PlanOptions(owner="me", lanes=states, **options))


def lane_states(
    ready: Mapping[str, Any],
    failed: Mapping[str, Any],
    retry_at: Mapping[str, tuple[Any, float]],
    swapped: frozenset[str],
    serving: Mapping[str, Serving],
    suspended: Mapping[str, SuspendedBy] | None = None,
) -> dict[str, LaneState]:
    """Each lane's state from the few facts a planner test names (see `run`)."""
    out: dict[str, LaneState] = {}
    for name in {*ready, *failed, *retry_at, *swapped, *serving, *(suspended or {})}:
        hold: Hold | None = None
        if name in failed:
            hold = Condemned(failed[name])
        elif name in retry_at:
            hold = Backoff(retry_at[name][0], retry_at[name][1], 1)
        if suspended and name in suspended:
            hold = replace(suspended[name], under=hold if isinstance(hold, Condemned | Backoff) else None)
        healthy, seen = None, ready.get(name)
        if name in serving:
            s = serving[name]
            gate = Gate(s.gate.host, s.gate.port, s.gate.served_model)
            healthy = LaneServing(s.fingerprint, tuple(spec_to_json(h, c) for h, c in s.specs), gate, s.commit)
            seen = s.fingerprint  # what serves is what was last seen ready
        undone = "a swap was undone" if name in swapped else None
        out[name] = LaneState(LaneHealth.HEALTHY, serving=seen, healthy=healthy, hold=hold, swap_undone=undone)
    return out


def stopped_state(commit: str, specs: Iterable[tuple[str, ContainerSpec]]) -> LaneState:
    """A lane stopped at `commit` whose last healthy spec ran `specs` (a swap begun before a restart)."""
    ranks = list(specs)
    healthy = LaneServing(fingerprint(ranks), tuple(spec_to_json(h, s) for h, s in ranks))
    return LaneState(LaneHealth.STOPPED, wanted=Wanted("stopped", commit), applied=commit, healthy=healthy)


def converge(desired: DesiredState) -> tuple[Plan, ObservedFleet]:
    first = run(desired, empty_fleet(desired))
    return first, applied_fleet(desired, first)


def lane_of(result: Plan, name: str) -> LanePlan:
    lp = result.lane(name)
    assert lp is not None
    return lp
