"""`plan(desired, observed, verdict)`: the pure diff from what runs to what should.

Level-triggered: the plan depends only on the newest desired state and this
cycle's observations, never on the history of commits, so a burst of pushes
and a daemon restart lead to the same plan.

A lane is planned as a whole. Ranks of a multi-node engine form one NCCL
group, so any drift in one rank (missing, exited, different spec) redeploys
all of its ranks rather than patching one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from reconciler.engines import ContainerSpec, render_lane, start_groups
from reconciler.facts.observed import ObservedContainer, ObservedFleet
from reconciler.plan.steps import (
    AcquireLeases,
    DropCaches,
    HostContainer,
    LanePlan,
    Plan,
    PullImages,
    StartRanks,
    Step,
    StopContainers,
    WaitReady,
    WriteEnvFiles,
)
from reconciler.policy import Verdict
from reconciler.spec.lane import Lane
from reconciler.spec.load import DesiredState

LABEL_PORT = "lanes.port"


@dataclass(frozen=True)
class PlanOptions:
    owner: str = "lanes"
    """Lease owner of this reconciler; a lease held by another owner blocks a lane."""
    drop_caches: bool = False
    failed: Mapping[str, str] = field(default_factory=dict)
    """lane -> fingerprint that failed its readiness gate: not retried until it changes or `lanes retry`."""
    only_lanes: frozenset[str] | None = None
    now: float | None = None
    """Clock for lease expiry; None takes each probe's own time."""


def fingerprint(specs: list[tuple[str, ContainerSpec]]) -> str:
    digest = hashlib.sha256()
    for host, spec in specs:
        digest.update(f"{host}\0{spec.name}\0{spec.spec_hash}\n".encode())
    return digest.hexdigest()[:16]


def plan(desired: DesiredState, observed: ObservedFleet, verdict: Verdict, options: PlanOptions | None = None) -> Plan:
    opts = options or PlanOptions()
    names = sorted(set(desired.lanes) | observed.lanes())
    if opts.only_lanes is not None:
        names = [n for n in names if n in opts.only_lanes]
    lane_plans = [_plan_lane(name, desired, observed, verdict, opts) for name in names]
    # Stops first: a lane moving onto hosts another lane leaves needs them free.
    lane_plans.sort(key=lambda lp: (lp.action != "stop", lp.lane))
    return Plan(commit=desired.commit, lanes=tuple(lane_plans))


FAILED_BEFORE = "failed its readiness gate before"
"""How a lane held back after its spec failed is described (the executor keeps the cause beside it)."""


def _plan_lane(
    name: str, desired: DesiredState, observed: ObservedFleet, verdict: Verdict, opts: PlanOptions
) -> LanePlan:
    lane = desired.lanes.get(name)
    current = observed.containers_of_lane(name)
    if lane is None or not lane.running:
        return _plan_stop(name, lane, current, observed, desired.commit)
    if name in verdict.denied_lanes:
        reasons = "; ".join(f"{v.rule}: {v.message}" for v in verdict.lane_violations(name) if v.severity == "deny")
        return LanePlan(name, "denied", f"denied by policy: {reasons}", hosts=lane.hosts, commit=desired.commit)
    unreachable = [h for h in _hosts_involved(lane, current) if not _reachable(observed, h)]
    if unreachable:
        reasons = "; ".join(f"{h}: {_host_error(observed, h)}" for h in unreachable)
        # "unreachable" covers a refused login or host key too: lanes cannot act there until a person fixes it.
        return LanePlan(name, "blocked", f"host(s) unreachable — {reasons}", hosts=lane.hosts, commit=desired.commit)
    specs = _render(lane, desired)
    fp = fingerprint(specs)
    squatters = _squatters(lane, observed)
    if _in_sync(specs, current) and not squatters:
        return LanePlan(
            name, "noop", "in sync", fingerprint=fp, specs=tuple(specs), hosts=lane.hosts, commit=desired.commit
        )
    if opts.failed.get(name) == fp:
        return LanePlan(
            name,
            "blocked",
            f"this spec ({fp}) {FAILED_BEFORE}; not retried until the lane changes or `lanes retry {name}`",
            fingerprint=fp,
            specs=tuple(specs),
            hosts=lane.hosts,
            commit=desired.commit,
        )
    model = desired.models[lane.model]
    for host in lane.hosts:
        presence = observed.hosts[host].models.get(model.path)
        if presence is None or not presence.exists:
            return LanePlan(
                name,
                "fail",
                f"model path {model.path} is missing on {host}; nothing was stopped",
                fingerprint=fp,
                specs=tuple(specs),
                hosts=lane.hosts,
                commit=desired.commit,
            )
    involved = _hosts_involved(lane, current)
    for host in involved:
        lease = observed.hosts[host].lease
        now = opts.now if opts.now is not None else (observed.hosts[host].probed_at or 0.0)
        if lease is not None and lease.held_by_other(opts.owner, now):
            return LanePlan(
                name,
                "blocked",
                f"{host} is leased by {lease.owner} until {lease.expires:.0f}",
                fingerprint=fp,
                specs=tuple(specs),
                hosts=lane.hosts,
                commit=desired.commit,
            )
    reason = _drift_reason(specs, current, squatters)
    steps: list[Step] = [AcquireLeases(involved)]
    steps.append(PullImages(tuple((host, spec.image) for host, spec in specs)))
    env_files = tuple(
        (host, spec.env_file, tuple((s.env, s.name) for s in lane.secrets))
        for host, spec in specs
        if spec.env_file and lane.secrets
    )
    if env_files:
        steps.append(WriteEnvFiles(env_files))
    old = tuple(HostContainer(host, c.name) for host, c in current)
    if old:
        steps.append(StopContainers(old, "replaced by the new spec"))
    if squatters:
        steps.append(StopContainers(squatters, f"unmanaged container on port {lane.port}"))
    if opts.drop_caches:
        steps.append(DropCaches(lane.hosts))
    by_rank = dict(enumerate(specs))
    steps.extend(StartRanks(tuple(by_rank[r] for r in group)) for group in start_groups(lane))
    head_host = lane.hosts[0]
    steps.append(WaitReady(head_host, lane.port, lane.served_name))
    return LanePlan(name, "deploy", reason, tuple(steps), fp, tuple(specs), lane.hosts, desired.commit)


def _plan_stop(
    name: str, lane: Lane | None, current: list[tuple[str, ObservedContainer]], observed: ObservedFleet, commit: str
) -> LanePlan:
    if not current:
        return LanePlan(name, "noop", "stopped", commit=commit)
    reachable = tuple(HostContainer(h, c.name) for h, c in current if _reachable(observed, h))
    unreachable = sorted({h for h, _ in current if not _reachable(observed, h)})
    why = "lane is stopped" if lane is not None else "lane was removed from the state"
    reason = why + (f"; unreachable, stopped later: {', '.join(unreachable)}" if unreachable else "")
    if not reachable:
        return LanePlan(name, "blocked", reason, commit=commit)
    hosts = tuple(sorted({c.host for c in reachable}))
    return LanePlan(
        name, "stop", reason, (AcquireLeases(hosts), StopContainers(reachable, why)), commit=commit, hosts=hosts
    )


def _render(lane: Lane, desired: DesiredState) -> list[tuple[str, ContainerSpec]]:
    specs = render_lane(lane, desired.models[lane.model], desired.fleet, desired.hosts, desired.commit)
    return [(lane.hosts[i], spec) for i, spec in enumerate(specs)]


def _hosts_involved(lane: Lane, current: list[tuple[str, ObservedContainer]]) -> tuple[str, ...]:
    hosts = list(lane.hosts)
    for host, _ in current:
        if host not in hosts:
            hosts.append(host)
    return tuple(hosts)


def _reachable(observed: ObservedFleet, host: str) -> bool:
    h = observed.host(host)
    return h is not None and h.reachable


def _host_error(observed: ObservedFleet, host: str) -> str:
    h = observed.host(host)
    if h is None:
        return "not probed"
    # Transport errors already start with the host's name; do not say it twice.
    return (h.error or "no answer").removeprefix(f"{host}: ")


def _in_sync(specs: list[tuple[str, ContainerSpec]], current: list[tuple[str, ObservedContainer]]) -> bool:
    want = {(host, spec.name, spec.spec_hash) for host, spec in specs}
    have = {(host, c.name, c.spec_hash) for host, c in current if c.running}
    return want == have and len(current) == len(specs)


def _squatters(lane: Lane, observed: ObservedFleet) -> tuple[HostContainer, ...]:
    out: list[HostContainer] = []
    for host in lane.hosts:
        h = observed.hosts[host]
        if lane.port not in h.listening:
            continue
        owned = any(c.running and c.labels.get(LABEL_PORT) == str(lane.port) for c in h.containers)
        if not owned:
            out.extend(HostContainer(host, u.name) for u in h.unmanaged if u.state == "running")
    return tuple(out)


def _drift_reason(
    specs: list[tuple[str, ContainerSpec]],
    current: list[tuple[str, ObservedContainer]],
    squatters: tuple[HostContainer, ...],
) -> str:
    if not current:
        return "not running: first deploy" if not squatters else "port taken by an unmanaged container"
    have = {(host, c.name): c for host, c in current}
    for host, spec in specs:
        c = have.get((host, spec.name))
        if c is None:
            return f"{spec.name} missing on {host}"
        if c.spec_hash != spec.spec_hash:
            return f"{spec.name} on {host} runs spec {c.spec_hash}, want {spec.spec_hash}"
        if not c.running:
            return f"{spec.name} on {host} is {c.state}"
    extra = [f"{c.name}@{h}" for h, c in current if (h, c.name) not in {(h2, s.name) for h2, s in specs}]
    if extra:
        return f"containers no longer wanted: {', '.join(extra)}"
    return "port taken by an unmanaged container" if squatters else "drift"
