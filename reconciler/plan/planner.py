"""`plan(desired, observed, verdict)`: the pure diff from what runs to what should.

Level-triggered: the plan depends only on the newest desired state and this
cycle's observations, never on the history of commits, so a burst of pushes
and a daemon restart lead to the same plan.

A lane is planned as a whole. Ranks of a multi-node engine form one NCCL
group, so any drift in one rank (missing, exited, different spec) redeploys
all of its ranks rather than patching one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from reconciler.engines import ContainerSpec, start_groups
from reconciler.engines.hostfacts import placeholders
from reconciler.engines.launcher import launcher_needs
from reconciler.facts.observed import ObservedContainer, ObservedFleet
from reconciler.lane import LaneState
from reconciler.plan.hostchecks import host_problems
from reconciler.plan.known import Known, known
from reconciler.plan.lanediff import (
    change_cause,
    drift_of,
    drift_reason,
    find_squatters,
    lease_holder,
    reachable,
    runs_desired,
)
from reconciler.plan.repair import repair_serving
from reconciler.plan.rollout import plan_rollouts
from reconciler.plan.steps import (
    AcquireLeases,
    Cause,
    DropCaches,
    HostContainer,
    LanePlan,
    Plan,
    PullImages,
    RemoveEnvFiles,
    StageModel,
    StartRanks,
    Step,
    StopContainers,
    WaitGpuFree,
    WaitReady,
    WriteEnvFiles,
    fingerprint,
)
from reconciler.plan.swaps import find_swaps, hold_failed_swaps, order_after
from reconciler.plan.windows import hold_for, restarts_running
from reconciler.policy import Verdict
from reconciler.spec.fleet import DataPort
from reconciler.spec.lane import Lane
from reconciler.spec.load import DesiredState
from reconciler.spec.windows import WindowsFile


@dataclass(frozen=True)
class PlanOptions:
    owner: str = "lanes"
    """Lease owner of this reconciler; a lease held by another owner blocks a lane."""
    drop_caches: bool = False
    lanes: Mapping[str, LaneState] = field(default_factory=dict)
    """Each lane's state (the journal's row): what failed, what was seen ready, what serves, what holds it."""
    wait_backoff: bool = True
    """False when a person asks for now (`lanes plan`/`apply`): a backoff paces the daemon's own retries only."""
    undoing: frozenset[str] = frozenset()
    """Taking lanes of a swap undo still pending (the journal's swap marks): they hold that swap like a lane whose
    state says its failure undid one."""
    clock: float = 0.0
    """The control node's time (epoch seconds), for a backoff's end."""
    only_lanes: frozenset[str] | None = None
    now: float | None = None
    """Clock for lease expiry; None takes each probe's own time."""
    windows: WindowsFile = field(default_factory=WindowsFile)
    """Change windows (`policies/windows.yaml`): a change that restarts a running lane waits for one."""
    window_clock: float | None = None
    """The instant change windows are judged at (epoch seconds); None takes `clock`."""
    window_override: bool = False
    """A person asked for now (`lanes apply --now`, a commit's `Lanes-Change-Window: now`): no change waits."""
    away: Mapping[str, float] = field(default_factory=dict)
    """Each lane's last measured start, to a first token (seconds): how long an in-place change keeps its model
    away (`reconciler.plan.rollout`)."""


def plan_fleet(
    desired: DesiredState, observed: ObservedFleet, verdict: Verdict, options: PlanOptions | None = None
) -> Plan:
    opts = options or PlanOptions()
    names = sorted(set(desired.lanes) | observed.lanes())
    if opts.only_lanes is not None:
        names = [n for n in names if n in opts.only_lanes]
    k = known(opts.lanes, wait_backoff=opts.wait_backoff, undoing=opts.undoing)
    lane_plans = [_plan_lane_safely(name, desired, observed, verdict, opts, k) for name in names]
    # Across lanes: a failed swap is not redone until its failed lane changes; stops and deploys on the
    # same hosts go as one swap; stops first, then `after:` order.
    lane_plans = hold_failed_swaps(lane_plans, k.swapped)
    lane_plans, swaps = find_swaps(lane_plans, k.stopped, k.ready)
    lane_plans = plan_rollouts(lane_plans, desired.fleet.gateway, observed, opts.lanes, swaps, opts.away)
    lane_plans = order_after(lane_plans, desired.lanes)
    return Plan(commit=desired.commit, lanes=tuple(lane_plans), swaps=swaps)


def _plan_lane_safely(
    name: str, desired: DesiredState, observed: ObservedFleet, verdict: Verdict, opts: PlanOptions, k: Known
) -> LanePlan:
    """One lane's plan; a fault in planning it costs that lane only (it is held, the others go on)."""
    try:
        return _plan_lane(name, desired, observed, verdict, opts, k)
    except Exception as exc:  # a planner bug must not stop the other lanes
        lane = desired.lanes.get(name)
        return LanePlan(
            name,
            "blocked",
            f"lanes could not plan this lane ({type(exc).__name__}: {exc}); nothing was changed",
            hosts=lane.hosts if lane else (),
            commit=desired.commit,
            cause=Cause.INTERNAL_ERROR,
        )


def _plan_lane(
    name: str, desired: DesiredState, observed: ObservedFleet, verdict: Verdict, opts: PlanOptions, k: Known
) -> LanePlan:
    lane = desired.lanes.get(name)
    current = observed.containers_of_lane(name)
    state = opts.lanes.get(name)
    person = state.suspension if state is not None else None  # a person's hold (`lanes suspend`), in its state
    if lane is not None and (lane.suspended or person is not None):
        why = person.reason(name) if person is not None else "suspended in its lane file"
        return _plan_suspended(lane, current, observed, verdict, desired.commit, why)
    if lane is None or not lane.running:
        return _plan_stop(name, lane, current, observed, desired.commit, desired.fleet.state_dir_on_host)
    base = LanePlan(name, "noop", "", hosts=lane.hosts, commit=desired.commit)
    if name in verdict.denied_lanes or name not in verdict.rendered:
        reasons = "; ".join(f"{v.rule}: {v.message}" for v in verdict.lane_violations(name) if v.severity == "deny")
        why = f"denied by policy: {reasons or 'not rendered'}"
        return replace(base, action="denied", reason=why, cause=Cause.DENIED)
    unreachable = [h for h in _hosts_involved(lane, current) if not reachable(observed, h)]
    if unreachable:
        reasons = "; ".join(f"{h}: {_host_error(observed, h)}" for h in unreachable)
        # "unreachable" covers a refused login or host key too: lanes cannot act there until a person fixes it.
        return replace(base, action="blocked", reason=f"host(s) unreachable — {reasons}", cause=Cause.UNREACHABLE)
    specs = verdict.rendered[name]
    fp = fingerprint(specs)
    per_host = (
        tuple((host, tuple((var, spec.env_map[var]) for var in sorted(lane.host_env))) for host, spec in specs)
        if lane.host_env
        else ()
    )
    with_specs = replace(base, fingerprint=fp, specs=tuple(specs), per_host=per_host)
    squatters = find_squatters(lane, observed)
    in_sync = runs_desired(specs, current) and not squatters
    if in_sync and k.ready.get(name) == fp:
        return replace(with_specs, reason="in sync")
    if k.failed.get(name) == fp:
        why = f"this spec ({fp}) {FAILED_BEFORE}; not retried until the lane changes or `lanes retry {name}`"
        condemned = replace(with_specs, action="blocked", reason=why, cause=Cause.CONDEMNED)
        return repair_serving(condemned, lane, current, observed, desired, opts, k.serving.get(name)) or condemned
    due = k.retry_at.get(name)
    if due is not None and due[0] == fp and opts.clock < due[1]:
        wait = due[1] - opts.clock
        why = f"this spec ({fp}) failed on a passing fault; tried again in {wait:.0f} s"
        backoff = replace(with_specs, action="blocked", reason=why, cause=Cause.BACKOFF)
        return repair_serving(backoff, lane, current, observed, desired, opts, k.serving.get(name)) or backoff
    involved = _hosts_involved(lane, current)
    held = lease_holder(involved, observed, opts.owner, opts.now)
    if held is not None:
        return replace(with_specs, action="blocked", reason=held, cause=Cause.LEASE_HELD)
    if in_sync:
        # The ranks run the desired spec, but no gate ever saw it ready (a daemon killed during the
        # wait, a journal started afresh): containers running is not an engine serving.
        steps: tuple[Step, ...] = (AcquireLeases(involved), WaitReady(lane.hosts[0], lane.port, lane.served_name))
        why = "the ranks run this spec but its readiness was never observed: gating it again"
        return replace(with_specs, action="verify", reason=why, steps=steps, cause=Cause.UNVERIFIED)
    model = desired.models[lane.model]
    stage = stage_step(lane, desired)
    for host in lane.hosts if stage is None else ():  # a model with an origin is staged where it is missing
        presence = observed.hosts[host].models.get(model.path)
        if presence is None or not presence.exists:
            why = f"model path {model.path} is missing on {host}; nothing was stopped"
            return replace(with_specs, action="fail", reason=why, cause=Cause.MODEL_MISSING)
    # The hosts as this cycle's probe saw them: a data-plane port down, an address or a RoCE GID missing.
    # Blocked, not failed: the lane is right as written and can run once the host is fixed.
    problems = host_problems(lane.hosts, desired.hosts, observed.hosts, desired.fleet.fabric.mtu)
    if problems:
        why = "; ".join(str(p) for p in problems) + "; nothing was stopped"
        return replace(with_specs, action="blocked", reason=why, cause=Cause.HOST_FACTS)
    # A per-rank value the probe reads (`host_env`, engines/hostfacts.py) that it has not read on this host:
    # the spec holds a placeholder, which must never run.
    unread = [f"{host}: host_env {v}" for host, spec in specs for v in placeholders(spec.env)]
    if unread:
        why = f"{'; '.join(unread)} not read by the probe; nothing was stopped"
        return replace(with_specs, action="blocked", reason=why, cause=Cause.HOST_FACTS)
    drift = drift_of(specs, current, squatters, lane.port)
    cause = change_cause(current, drift, was_ready=name in k.ready)
    reason = drift_reason(cause, drift)
    if not opts.window_override and restarts_running(current, drift):
        at = opts.window_clock if opts.window_clock is not None else opts.clock
        hold = hold_for(lane, desired, opts.windows, at)
        if hold is not None:
            why = f"{reason}; {hold.describe()} (`lanes apply --now` applies it at once)"
            until = hold.until.timestamp() if hold.until is not None else None
            return replace(
                with_specs, action="blocked", reason=why, cause=Cause.CHANGE_WINDOW, drift=drift, held_until=until
            )
    steps_list: list[Step] = [AcquireLeases(involved)]
    cuda = tuple((h, info.cuda_version) for h in lane.hosts if (info := observed.hosts[h].info) and info.cuda_version)
    pulls = tuple((host, spec.image) for host, spec in specs)
    steps_list.append(PullImages(pulls, needs=launcher_needs(lane), host_cuda=cuda))
    if stage is not None:
        steps_list.append(stage)
    env_files = tuple(
        (host, spec.env_file, tuple((s.env, s.name) for s in lane.secrets))
        for host, spec in specs
        if spec.env_file and lane.secrets
    )
    if env_files:
        steps_list.append(WriteEnvFiles(env_files))
    old = tuple(HostContainer(host, c.name) for host, c in current)
    if old:
        stop_why = "replaced by the new spec" if cause == Cause.SPEC_CHANGED else f"redeployed: {reason}"
        steps_list.append(StopContainers(old, stop_why))
    if squatters:
        steps_list.append(StopContainers(squatters, f"unmanaged container on port {lane.port}"))
    if opts.drop_caches:
        steps_list.append(DropCaches(lane.hosts))
    steps_list.append(WaitGpuFree(lane.hosts))
    by_rank = dict(enumerate(specs))
    steps_list.extend(StartRanks(tuple(by_rank[r] for r in group)) for group in start_groups(lane))
    steps_list.append(WaitReady(lane.hosts[0], lane.port, lane.served_name))
    # Once the new ranks passed their gate: env files of old ranks that the new spec does not write
    # (a dropped secret, a rank moved off a host). Before that a rollback may start the old ranks again.
    written = {(host, path) for host, path, _ in env_files}
    stale = tuple(
        (host, path)
        for host, c in current
        if (path := env_file_path(desired.fleet.state_dir_on_host, c.name)) and (host, path) not in written
    )
    if stale:
        steps_list.append(RemoveEnvFiles(stale))
    return replace(with_specs, action="deploy", reason=reason, steps=tuple(steps_list), cause=cause, drift=drift)


def stage_step(lane: Lane, desired: DesiredState) -> StageModel | None:
    """The staging of the lane's model before anything stops, when the model says where it comes from."""
    model = desired.models[lane.model]
    manifest = desired.manifests.get(model.name)
    if model.origin is None or manifest is None:
        return None
    spark = model.origin.host is not None and model.origin.host in desired.hosts
    origin = (model.origin.host, model.origin.path, spark)
    involved = [*lane.hosts, *([model.origin.host] if spark and model.origin.host else [])]
    data = tuple((h, port.address.split("/")[0]) for h in dict.fromkeys(involved) if (port := _first_port(desired, h)))
    return StageModel(model.name, model.path, tuple(dict.fromkeys(lane.hosts)), origin, manifest, data)


def _first_port(desired: DesiredState, host: str) -> DataPort | None:
    spec = desired.hosts.get(host)
    return spec.data_plane[0] if spec is not None and spec.data_plane else None


FAILED_BEFORE = "failed its readiness gate before"
"""How a lane held back after its spec failed is described (to people: the plan's cause says it to code)."""


def env_file_path(state_dir_on_host: str, container: str) -> str:
    """Where a rank's env file is on its host (as `engines.base` renders `ContainerSpec.env_file`)."""
    return f"{state_dir_on_host}/env/{container}.env"


def _plan_suspended(
    lane: Lane,
    current: list[tuple[str, ObservedContainer]],
    observed: ObservedFleet,
    verdict: Verdict,
    commit: str,
    held_by: str,
) -> LanePlan:
    """Hands off: no steps at all; how what runs differs from the lane file is said, never repaired."""
    specs: Sequence[tuple[str, ContainerSpec]] = verdict.rendered.get(lane.name, ())
    seen = bool(specs) and all(reachable(observed, h) for h in lane.hosts)
    drift = drift_of(specs, current, find_squatters(lane, observed), lane.port) if seen else ()
    why = f"{held_by}: what runs is left as it is (no apply, no repair, no rollback)"
    if drift:
        why += "; left as it is: " + "; ".join(d.describe() for d in drift)
    return LanePlan(lane.name, "suspended", why, hosts=lane.hosts, commit=commit, cause=Cause.SUSPENDED, drift=drift)


def _plan_stop(
    name: str,
    lane: Lane | None,
    current: list[tuple[str, ObservedContainer]],
    observed: ObservedFleet,
    commit: str,
    state_dir_on_host: str,
) -> LanePlan:
    if not current:
        return LanePlan(name, "noop", "stopped", commit=commit, cause=Cause.NOTHING_RUNS)
    answering = tuple(HostContainer(h, c.name) for h, c in current if reachable(observed, h))
    unreachable = sorted({h for h, _ in current if not reachable(observed, h)})
    why = "lane is stopped" if lane is not None else "lane was removed from the state"
    cause = Cause.LANE_STOPPED if lane is not None else Cause.LANE_REMOVED
    reason = why + (f"; unreachable, stopped later: {', '.join(unreachable)}" if unreachable else "")
    if not answering:
        return LanePlan(name, "blocked", reason, commit=commit, cause=Cause.UNREACHABLE)
    hosts = tuple(sorted({c.host for c in answering}))
    # The stopped ranks' env files go with them (a missing one is fine: the lane may have had no secrets).
    env_files = RemoveEnvFiles(tuple((c.host, env_file_path(state_dir_on_host, c.name)) for c in answering))
    steps = (AcquireLeases(hosts), StopContainers(answering, why), env_files)
    return LanePlan(name, "stop", reason, steps, commit=commit, hosts=hosts, cause=cause)


def _hosts_involved(lane: Lane, current: list[tuple[str, ObservedContainer]]) -> tuple[str, ...]:
    hosts = list(lane.hosts)
    for host, _ in current:
        if host not in hosts:
            hosts.append(host)
    return tuple(hosts)


def _host_error(observed: ObservedFleet, host: str) -> str:
    h = observed.host(host)
    if h is None:
        return "not probed"
    # Transport errors already start with the host's name; do not say it twice.
    return (h.error or "no answer").removeprefix(f"{host}: ")
