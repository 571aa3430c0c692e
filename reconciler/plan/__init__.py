"""plan: the pure diff between desired lanes and observed hosts (lane health is `reconciler.lane`'s)."""

from reconciler.plan.planner import PlanOptions, plan_fleet
from reconciler.plan.steps import Cause, Drift, DriftKind, LanePlan, Plan, Step, fingerprint

__all__ = [
    "Cause",
    "Drift",
    "DriftKind",
    "LanePlan",
    "Plan",
    "PlanOptions",
    "Step",
    "fingerprint",
    "plan_fleet",
]
