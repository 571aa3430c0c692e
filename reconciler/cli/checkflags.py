"""`lanes check`'s word on who judged each lane's engine flags: its image, a flag table, or nobody.

The image's own parser (the daemon's preflight, `execute/preflight.py`) has the last word when it has
spoken: its verdict for this image digest and argv is read from the journal, read-only, and a kept
refusal denies the lane here as it does in the daemon. Else a flag table judges (exactly, or standing
in for a build it was not read from: `engines/flagtable.py`), else nothing does until the daemon's
preflight runs the image.
"""

from __future__ import annotations

from pathlib import Path

from reconciler.engines.flags import table_for
from reconciler.facts.preflight import SCRIPTS
from reconciler.policy import Verdict
from reconciler.policy.preflight import Refusal, head_keys, judged_by, with_refusals
from reconciler.policy.rules.flags import CHECKED_ENGINES
from reconciler.spec.load import DesiredState
from reconciler.store.preflight import read_cached


def flags_judged(desired: DesiredState, verdict: Verdict, db: Path) -> tuple[Verdict, dict[str, dict[str, object]]]:
    """The verdict with kept refusals added, and per lane how its flags were judged (for --json and people)."""
    kept = judged_by(read_cached(db, head_keys(desired, verdict)), desired, verdict)
    out: dict[str, dict[str, object]] = {}
    for name in sorted(desired.lanes):
        lane = desired.lanes[name]
        if lane.engine not in CHECKED_ENGINES:
            continue
        seen = kept.get(name)
        match = table_for(lane.engine, lane.engine_version)
        if seen is not None:
            out[name] = {
                "judged_by": "image",
                "outcome": seen.outcome,
                "message": seen.message,
                "host": seen.host,
                "judged_at": seen.judged_at,
            }
        elif match is not None:
            out[name] = {"judged_by": "table", "table": f"{match.table.engine}-{match.table.version}",
                         "how": match.how, "exact": match.exact}  # fmt: skip
        else:
            out[name] = {"judged_by": "none", "preflight": lane.engine in SCRIPTS}
    refusals = {
        name: Refusal(name, seen.host, seen.image, seen.message, desired.lane_file(name), cached=True)
        for name, seen in kept.items()
        if seen.outcome == "refused"
    }
    return with_refusals(verdict, refusals), out


def describe(name: str, judged: dict[str, object]) -> str:
    """One line for people."""
    kind = judged["judged_by"]
    if kind == "image":
        said = f": {judged['message']}" if judged["message"] else ""
        return f"{name}: by its image's own parser on {judged['host']} ({judged['outcome']}, kept verdict){said}"
    if kind == "table":
        how = "exactly" if judged["exact"] else f"standing in ({judged['how']}): refusals only warn"
        return f"{name}: by the flag table {judged['table']}, {how}"
    if judged.get("preflight"):
        return f"{name}: not at all yet (no flag table; the daemon's preflight runs its image's own parser)"
    return f"{name}: not at all (no flag table, and lanes cannot run this engine's parser alone)"
