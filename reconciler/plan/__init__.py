"""plan: the pure diff between desired lanes and observed hosts, and lane health as a state machine."""

from reconciler.plan.health import LaneHealth, Outcome, next_health
from reconciler.plan.planner import PlanOptions, fingerprint, plan_fleet
from reconciler.plan.steps import Cause, Drift, DriftKind, LanePlan, Plan, Step

__all__ = [
    "Cause",
    "Drift",
    "DriftKind",
    "LaneHealth",
    "LanePlan",
    "Outcome",
    "Plan",
    "PlanOptions",
    "Step",
    "fingerprint",
    "next_health",
    "plan_fleet",
]
