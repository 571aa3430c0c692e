"""`engine-preflight`: a lane whose pinned image's own parser refused its arguments is denied.

The verdict comes from running the engine's argument parsing inside the image (`execute/preflight.py`,
`facts/preflight.py`), so it is not one of the pure rules `evaluate` runs on a commit: it joins the
commit's verdict as a deny of that one lane, in the engine's own words, before the plan is made, and
the planner treats it as any other deny (the lane is `denied`, nothing of it stopped or started).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TypeVar

from reconciler.engines.flags import engine_argv
from reconciler.facts import docker
from reconciler.facts.container import ContainerSpec
from reconciler.facts.preflight import SCRIPTS, argv_key
from reconciler.policy.verdict import Verdict, Violation
from reconciler.spec.load import DesiredState

V = TypeVar("V")

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


def head_key(engine: str, spec: ContainerSpec) -> tuple[str, tuple[str, ...], str] | None:
    """(digest, engine arguments, cache key) of one rank's spec; None without engine arguments or a pin.

    Pure, and here rather than beside the preflight that runs images (`execute/preflight.py`), so that
    `lanes check` reads kept verdicts without importing the SSH transport."""
    found = engine_argv(engine, [spec.entrypoint or "", *spec.command])
    digest = docker.pinned_digest(spec.image)
    if found is None or digest is None:  # an unpinned image is the pins rule's to deny
        return None
    argv = tuple(found[1])
    return digest, argv, argv_key(engine, digest, argv)


def judged_by(verdicts: Mapping[str, V], desired: DesiredState, verdict: Verdict) -> dict[str, V]:
    """Per lane whose engine lanes can parse: its image's kept verdict on its head rank's arguments."""
    out = {}
    for name, ranks in sorted(verdict.rendered.items()):
        lane = desired.lanes.get(name)
        if lane is None or lane.engine not in SCRIPTS or not ranks:
            continue
        found = head_key(lane.engine, ranks[0][1])
        if found is not None and found[2] in verdicts:
            out[name] = verdicts[found[2]]
    return out


def head_keys(desired: DesiredState, verdict: Verdict) -> list[str]:
    """The cache keys `judged_by` looks up, to read them from a journal."""
    keys = []
    for name, ranks in sorted(verdict.rendered.items()):
        lane = desired.lanes.get(name)
        if lane is not None and lane.engine in SCRIPTS and ranks and (found := head_key(lane.engine, ranks[0][1])):
            keys.append(found[2])
    return keys
