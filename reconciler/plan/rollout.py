"""How a change of a lane the gateway routes reaches its clients: chosen from hosts and state, stated in the plan.

A Spark cannot hold two copies of a big model, so the new spec can run beside the old one only on other
Sparks. Given the lane's plan, the strategy is:

- blue/green when the new spec's hosts share none with the ranks that serve now and no other lane runs
  there: the new ranks start and are gated beside the old ones, the model's route moves to them, a watch
  window follows while the old ranks still run (so a failure moves the traffic back at once), then the old
  ranks stop (`Watch`, then the old ranks' `StopContainers`, after the gate);
- one replica at a time when another lane of the same model serves meanwhile: this lane is taken out of the
  route and drained, then swapped; two replicas changed by one commit go one after the other (`after`);
- in place otherwise: the lane is drained into the gateway's holding answer (503 with Retry-After, the
  lane's last measured start) and swapped; the plan says how long the model is expected to be away.

Pure: it reads the plans, the wanted state, the observed containers and the lanes' states.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from reconciler.facts.observed import ObservedFleet
from reconciler.lane import Gate, LaneState
from reconciler.plan.steps import (
    Drain,
    LanePlan,
    RemoveEnvFiles,
    Rollout,
    RolloutKind,
    Step,
    StopContainers,
    Swap,
    WaitReady,
    Watch,
)
from reconciler.spec.gateway import Analysis, Gateway

UNMANAGED = "unmanaged container"
"""The start of the reason of a step that stops squatters on the lane's port (planner), not the lane's ranks."""


def _old_ranks(lp: LanePlan) -> StopContainers | None:
    """The step that stops the lane's own running ranks, if the plan has one."""
    return next((s for s in lp.steps if isinstance(s, StopContainers) and not s.reason.startswith(UNMANAGED)), None)


def _squatted(lp: LanePlan) -> bool:
    return any(isinstance(s, StopContainers) and s.reason.startswith(UNMANAGED) for s in lp.steps)


def _others_on(lp: LanePlan, observed: ObservedFleet) -> bool:
    """Whether any container of another lane runs on the plan's hosts (then they are not free Sparks)."""
    for host in lp.hosts:
        seen = observed.hosts.get(host)
        if seen is None:
            return True  # not observed: not known to be free
        for container in seen.containers:
            if container.running and container.lane is not None and container.lane != lp.lane:
                return True
    return False


def plan_rollouts(
    lane_plans: Sequence[LanePlan],
    gateway: Gateway | None,
    observed: ObservedFleet,
    states: Mapping[str, LaneState],
    swaps: Sequence[Swap] = (),
    away: Mapping[str, float] | None = None,
) -> list[LanePlan]:
    """Every plan of a lane the gateway routes, given its rollout and the steps that carry it out."""
    if gateway is None:
        return list(lane_plans)
    in_swaps = {lane for swap in swaps for lane in (*swap.giving, *swap.taking)}
    given: dict[str, list[str]] = {}  # model -> replicas of it already given a rollout in this plan, in order
    out: list[LanePlan] = []
    for lp in lane_plans:
        model = gateway.model_of(lp.lane)
        old = _old_ranks(lp)
        if model is None or lp.action != "deploy" or old is None:
            out.append(lp)
            continue
        state = states.get(lp.lane)
        serving = state.route() if state is not None else None
        analysis = gateway.analysis_of(lp.lane)
        old_hosts = {c.host for c in old.containers}
        replicas = [name for name in gateway.models[model] if name != lp.lane]
        before = given.setdefault(model, [])
        if (
            serving is not None
            and lp.lane not in in_swaps
            and not old_hosts & set(lp.hosts)
            and not _squatted(lp)
            and not _others_on(lp, observed)
        ):
            why = f"{', '.join(lp.hosts)} are free and share no host with the ranks that serve now"
            rollout = Rollout(RolloutKind.BLUE_GREEN, model, why)
            out.append(replace(lp, rollout=rollout, steps=_blue_green(lp, old, model, analysis, serving)))
        elif any(_routed(states.get(name)) for name in replicas) or before:
            others = [n for n in replicas if _routed(states.get(n))] or before
            why = f"{', '.join(others)} serve{'s' if len(others) == 1 else ''} {model} meanwhile"
            rollout = Rollout(RolloutKind.REPLICA, model, why)
            steps = _drained(lp, old, model, serving, analysis.drain_s)
            after = tuple(dict.fromkeys((*lp.after, *before[-1:])))  # one at a time: after the replica before it
            out.append(replace(lp, rollout=rollout, steps=steps, after=after))
        else:
            why = "no free Sparks for the new spec beside the old, and no other lane serves the model"
            seconds = (away or {}).get(lp.lane)
            rollout = Rollout(RolloutKind.IN_PLACE, model, why, away_s=seconds)
            out.append(replace(lp, rollout=rollout, steps=_drained(lp, old, model, serving, analysis.drain_s)))
        before.append(lp.lane)
    return out


def _routed(state: LaneState | None) -> bool:
    """A replica routed now; one this plan changes too still is, until its own turn (one at a time)."""
    return state is not None and state.route() is not None


def _drained(lp: LanePlan, old: StopContainers, model: str, serving: Gate | None, timeout_s: float) -> tuple[Step, ...]:
    """The plan's steps with a drain before its old ranks stop, when the lane is routed now."""
    if serving is None:
        return lp.steps
    steps: list[Step] = []
    for step in lp.steps:
        if step is old:
            steps.append(Drain(model, serving.host, serving.port, timeout_s))
        steps.append(step)
    return tuple(steps)


def _blue_green(lp: LanePlan, old: StopContainers, model: str, analysis: Analysis, serving: Gate) -> tuple[Step, ...]:
    """Start and gate beside the old ranks, watch, then stop the old ranks and their stale env files."""
    head = next(s for s in reversed(lp.steps) if isinstance(s, WaitReady))
    ahead = [s for s in lp.steps if s is not old and not isinstance(s, RemoveEnvFiles)]
    after_gate: list[Step] = [
        Watch(
            model,
            head.host,
            head.port,
            analysis.watch_s,
            analysis.max_error_rate,
            analysis.min_requests,
            served_model=head.served_model,
            old_host=serving.host,
            old_port=serving.port,
            max_slowdown=analysis.max_slowdown,
            drain_s=analysis.drain_s,
            max_ttft_s=analysis.max_ttft_s,
        ),
        StopContainers(old.containers, "replaced by the new spec on other hosts (blue/green, after its watch)"),
    ]
    after_gate.extend(s for s in lp.steps if isinstance(s, RemoveEnvFiles))
    return (*ahead, *after_gate)
