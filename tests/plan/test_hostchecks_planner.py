"""The planner refuses a multi-node lane whose rank hosts' data plane cannot carry it, before anything stops."""

from __future__ import annotations

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
    verdict = evaluate(desired, example_policies())
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
