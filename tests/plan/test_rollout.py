"""The rollout a routed lane's change gets (blue/green, one replica at a time, in place), and its steps.

The example fleet routes `deepseek-v4-flash` to the nightly lane (EUGR, on dgx5-7) through the gateway.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconciler.lane import Gate, LaneHealth, LaneState
from reconciler.lane import Serving as LaneServing
from reconciler.plan import Plan, fingerprint
from reconciler.plan.specjson import spec_to_json
from reconciler.plan.steps import Drain, RolloutKind, StopContainers, WaitReady, Watch
from reconciler.policy import evaluate
from reconciler.spec.gateway import Analysis, Gateway
from reconciler.spec.lane import Lane
from reconciler.spec.load import DesiredState
from tests.support.example import EUGR, PRODUCTION, example_policies, example_state, with_lane
from tests.support.planfleet import applied_fleet, converge, empty_fleet, lane_of, run

pytestmark = pytest.mark.timeout(30)
MODEL = "deepseek-v4-flash"
NEW = "eugr/spark-vllm-b12x@sha256:" + "cd" * 32
TWIN = "eugr-nightly-dsv41-3x-b"


def serving(desired: DesiredState, *names: str) -> dict[str, LaneState]:
    """Each lane healthy at its spec in `desired`, gated on its head: what a routed lane's state says."""
    verdict = evaluate(desired, example_policies(), host_info=empty_fleet(desired).host_info())
    out = {}
    for name in names:
        lane, specs = desired.lanes[name], verdict.rendered[name]
        fp = fingerprint(specs)
        healthy = LaneServing(
            fp, tuple(spec_to_json(h, s) for h, s in specs), Gate(lane.hosts[0], lane.port, lane.served_name)
        )
        out[name] = LaneState(LaneHealth.HEALTHY, serving=fp, healthy=healthy)
    return out


def without_production(desired: DesiredState) -> DesiredState:
    """The production lane stopped: dgx1-4 are free Sparks."""
    return with_lane(desired, PRODUCTION, desired="stopped")


def kinds(plan: Plan, lane: str) -> list[str]:
    return [s.kind for s in lane_of(plan, lane).steps]


def test_a_new_image_on_the_same_hosts_is_in_place_and_says_how_long_the_model_is_away() -> None:
    desired = without_production(example_state())
    _, applied = converge(desired)
    changed = with_lane(desired, EUGR, image=NEW)
    plan = run(changed, applied, lanes=serving(desired, EUGR), away={EUGR: 512.0})
    lp = lane_of(plan, EUGR)
    assert lp.rollout is not None and lp.rollout.kind is RolloutKind.IN_PLACE and lp.rollout.model == MODEL
    assert lp.rollout.away_s == 512.0 and "about 512 s" in lp.rollout.describe()
    steps = kinds(plan, EUGR)
    # Drained out of its route (into the holding answer) before its ranks stop, then started and gated.
    assert steps.index("drain") == steps.index("stop") - 1 and "watch" not in steps
    drain = next(s for s in lp.steps if isinstance(s, Drain))
    assert (drain.host, drain.port, drain.model, drain.timeout_s) == ("dgx5", 8000, MODEL, Analysis().drain_s)


def test_a_move_to_free_sparks_is_blue_green_the_old_ranks_stop_after_the_watch() -> None:
    desired = without_production(example_state())
    _, applied = converge(desired)
    moved = with_lane(desired, EUGR, hosts=["dgx1", "dgx2", "dgx3"])
    plan = run(moved, applied, lanes=serving(desired, EUGR))
    lp = lane_of(plan, EUGR)
    assert lp.rollout is not None and lp.rollout.kind is RolloutKind.BLUE_GREEN
    assert "dgx1, dgx2, dgx3 are free" in lp.rollout.why
    steps = kinds(plan, EUGR)
    assert steps.index("start") < steps.index("wait-ready") < steps.index("watch") < steps.index("stop")
    assert "drain" not in steps
    watch = next(s for s in lp.steps if isinstance(s, Watch))
    gate = next(s for s in lp.steps if isinstance(s, WaitReady))
    assert (
        (watch.host, watch.port, watch.served_model)
        == (gate.host, gate.port, gate.served_model)
        == (
            "dgx1",
            8000,
            MODEL,
        )
    )
    stop = next(s for s in lp.steps if isinstance(s, StopContainers))
    assert {c.host for c in stop.containers} == {"dgx5", "dgx6", "dgx7"}  # the old ranks, after the watch


def test_a_move_that_keeps_a_host_of_the_serving_ranks_is_in_place() -> None:
    desired = without_production(example_state())
    _, applied = converge(desired)
    moved = with_lane(desired, EUGR, hosts=["dgx6", "dgx7", "dgx5"])  # its head moves; no Spark holds two copies
    plan = run(moved, applied, lanes=serving(desired, EUGR))
    lp = lane_of(plan, EUGR)
    assert lp.rollout is not None and lp.rollout.kind is RolloutKind.IN_PLACE
    assert kinds(plan, EUGR).index("stop") < kinds(plan, EUGR).index("start")


def test_a_lane_that_does_not_serve_now_is_not_blue_green() -> None:
    desired = without_production(example_state())
    _, applied = converge(desired)
    moved = with_lane(desired, EUGR, hosts=["dgx1", "dgx2", "dgx3"])
    plan = run(moved, applied)  # no gate recorded: nothing routes to it, nothing to keep serving
    lp = lane_of(plan, EUGR)
    assert lp.rollout is not None and lp.rollout.kind is RolloutKind.IN_PLACE
    assert "drain" not in kinds(plan, EUGR)


def with_twin(desired: DesiredState) -> DesiredState:
    """A second replica of the nightly lane on dgx1-3, both under `deepseek-v4-flash` in the gateway."""
    data = {**desired.lanes[EUGR].model_dump(), "name": TWIN, "hosts": ("dgx1", "dgx2", "dgx3")}
    assert desired.fleet.gateway is not None
    models = {**desired.fleet.gateway.models, MODEL: (EUGR, TWIN)}
    gateway = desired.fleet.gateway.model_copy(update={"models": models})
    fleet = desired.fleet.model_copy(update={"gateway": gateway})
    return replace(desired, fleet=fleet, lanes={**desired.lanes, TWIN: Lane.model_validate(data)})


def test_replicas_changed_by_one_commit_go_one_at_a_time_each_drained_while_the_other_serves() -> None:
    desired = with_twin(without_production(example_state()))
    first, _ = converge(desired)
    applied = applied_fleet(desired, first)
    changed = with_lane(with_lane(desired, EUGR, image=NEW), TWIN, image=NEW)
    plan = run(changed, applied, lanes=serving(desired, EUGR, TWIN))
    one, two = lane_of(plan, EUGR), lane_of(plan, TWIN)
    assert one.rollout is not None and two.rollout is not None
    assert one.rollout.kind is two.rollout.kind is RolloutKind.REPLICA
    assert TWIN in one.rollout.why and one.after == ()
    assert two.after == (EUGR,)  # after the replica before it: never both away at once
    assert [lp.lane for lp in plan.lanes].index(EUGR) < [lp.lane for lp in plan.lanes].index(TWIN)
    for lane in (EUGR, TWIN):
        steps = kinds(plan, lane)
        assert steps.index("drain") == steps.index("stop") - 1


def test_without_a_gateway_no_rollout_is_said_and_the_steps_are_as_before() -> None:
    desired = without_production(example_state())
    desired = replace(desired, fleet=desired.fleet.model_copy(update={"gateway": None}))
    _, applied = converge(desired)
    plan = run(with_lane(desired, EUGR, hosts=["dgx1", "dgx2", "dgx3"]), applied, lanes=serving(desired, EUGR))
    lp = lane_of(plan, EUGR)
    assert lp.rollout is None
    steps = kinds(plan, EUGR)
    assert steps.index("stop") < steps.index("start") and "watch" not in steps and "drain" not in steps


def test_a_lanes_own_thresholds_win_over_the_gateways() -> None:
    own = Analysis(watch_s=7, max_error_rate=0.5, min_requests=3, max_ttft_s=2.5)
    gateway = Gateway(models={MODEL: (EUGR,)}, lanes={EUGR: own})
    assert gateway.analysis_of(EUGR) == own and gateway.analysis_of("other") == Analysis()
    desired = without_production(example_state())
    desired = replace(desired, fleet=desired.fleet.model_copy(update={"gateway": gateway}))
    _, applied = converge(desired)
    plan = run(with_lane(desired, EUGR, hosts=["dgx1", "dgx2", "dgx3"]), applied, lanes=serving(desired, EUGR))
    watch = next(s for s in lane_of(plan, EUGR).steps if isinstance(s, Watch))
    assert (watch.window_s, watch.max_error_rate, watch.min_requests, watch.max_ttft_s) == (7, 0.5, 3, 2.5)
