"""policy: the pure checks a commit must pass before anything runs.

`evaluate(desired, policies)` returns a `Verdict` of `Violation`s and the
per-rank `RankBudget`s; every figure comes from `policies/`, none from code.
"""

from reconciler.policy.evaluate import evaluate
from reconciler.policy.verdict import RankBudget, Verdict, Violation

__all__ = ["RankBudget", "Verdict", "Violation", "evaluate"]
