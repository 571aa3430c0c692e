"""plan: the pure diff between desired lanes and observed hosts."""

from reconciler.plan.planner import PlanOptions, fingerprint, plan
from reconciler.plan.steps import LanePlan, Plan, Step

__all__ = ["LanePlan", "Plan", "PlanOptions", "Step", "fingerprint", "plan"]
