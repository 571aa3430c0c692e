"""`engine-preflight`: a lane whose pinned image's own parser refused its arguments is denied.

The verdict comes from running the engine's argument parsing inside the image (`execute/preflight.py`,
`facts/preflight.py`), so it is not one of the pure rules `evaluate` runs on a commit: it joins the
commit's verdict as a deny of that one lane, in the engine's own words, before the plan is made, and
the planner treats it as any other deny (the lane is `denied`, nothing of it stopped or started).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from reconciler.policy.verdict import Verdict, Violation

RULE = "engine-preflight"


@dataclass(frozen=True)
class Refusal:
    """What one lane's image said of its arguments."""

    lane: str
    host: str
    image: str
    message: str
    """The engine's sentence: `vllm: error: unrecognized arguments: --enable-prefix-cachng`."""
    file: str
    cached: bool
    """Judged at an earlier cycle (the journal's verdict for this digest and argv), not just now."""


def with_refusals(verdict: Verdict, refusals: Mapping[str, Refusal]) -> Verdict:
    """The verdict with one deny per refused lane (the same verdict when there is none)."""
    if not refusals:
        return verdict
    added = tuple(
        Violation(
            rule=RULE,
            severity="deny",
            lane=name,
            host=r.host,
            rank=0,
            message=(
                f"{r.file}: args: the image's own parser refused rank 0's command line"
                f"{' (verdict kept from an earlier run)' if r.cached else ''}, on {r.host}: {r.message}"
            ),
            detail={"file": r.file, "field": "args", "image": r.image, "cached": r.cached, "judged_by": "image"},
        )
        for name, r in sorted(refusals.items())
    )
    return replace(verdict, violations=(*verdict.violations, *added))
