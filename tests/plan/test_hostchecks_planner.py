"""The planner refuses a multi-node lane whose rank hosts' data plane cannot carry it, before anything stops."""

from __future__ import annotations

import dataclasses

import pytest

from reconciler.facts.observed import ObservedFleet, ObservedHost
from reconciler.plan import PlanOptions, fingerprint, plan_fleet
from reconciler.plan.steps import Cause
from reconciler.policy import evaluate
from reconciler.spec.load import DesiredState
from tests.support.example import EUGR, PRODUCTION, example_policies
from tests.support.planfleet import lane_states

from .test_hostchecks import DESIRED, DGX2, _link, observed

pytestmark = pytest.mark.timeout(30)


def _plan(desired: DesiredState, fleet: dict[str, ObservedHost]) -> dict[str, tuple[str, Cause, str]]:
    # Rendered with what the probe read, as a cycle renders: the production lane's host_env needs it.
    verdict = evaluate(desired, example_policies(), host_info=ObservedFleet(fleet).host_info())
    ready = {name: fingerprint(specs) for name, specs in verdict.rendered.items()}
    options = PlanOptions(owner="me", lanes=lane_states(ready, {}, {}, frozenset(), {}))
    plan = plan_fleet(desired, ObservedFleet(fleet), verdict, options)
    return {lp.lane: (lp.action, lp.cause, lp.reason) for lp in plan.lanes}


def test_the_planner_blocks_the_lane_before_anything_stops_and_leaves_the_others() -> None:
    down = _link(DGX2, "enp1s0f0np0", operstate="down")
    lanes = _plan(DESIRED, observed(DESIRED, dgx2=down))
    action, cause, reason = lanes[PRODUCTION]
    assert (action, cause) == ("blocked", Cause.HOST_FACTS)
    assert reason == "dgx2: enp1s0f0np0 is down, not up; nothing was stopped"
    assert lanes[EUGR][0] == "deploy"  # the ring on dgx5-7 is not concerned
    healthy_fleet = _plan(DESIRED, observed(DESIRED))
    assert healthy_fleet[PRODUCTION][0] == "deploy"


def test_a_per_rank_value_the_probe_could_not_read_blocks_the_lane_naming_host_and_fact() -> None:
    """The production lane takes each rank's RoCE v2 GID index from its host's probe (`host_env`): where the
    probe could not read the RDMA devices (an unreadable /sys/class/infiniband, which alone blocks nothing),
    the lane is blocked with the host and the fact named, nothing stopped; the other lanes go on."""
    lanes = _plan(DESIRED, observed(DESIRED, dgx2=dataclasses.replace(DGX2, rdma=None)))
    action, cause, reason = lanes[PRODUCTION]
    assert (action, cause) == ("blocked", Cause.HOST_FACTS)
    assert reason == (
        "dgx2: host_env B12X_ROCE_GID_INDEX: roce_gid_index; dgx2: host_env NCCL_IB_GID_INDEX: roce_gid_index "
        "not read by the probe; nothing was stopped"
    )
    assert lanes[EUGR][0] == "deploy"
