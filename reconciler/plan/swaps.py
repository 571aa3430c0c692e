"""Swaps and order between lanes: what the planner decides across lanes after planning each one.

A swap is a commit that stops some lanes and deploys others on the hosts they free (the four
production Sparks moving from one model to another). It is applied as one transaction: the giving
lanes stop, the taking lanes start, and if a taking lane fails its gate the giving lanes come back on
their last healthy spec (`reconciler.execute.swap`). So that the next cycle does not undo that rollback,
a giving lane is not stopped again while a lane that would take its hosts is held back after failing
(condemned, or waiting out a backoff): both sides wait, and the swap runs again once the failed lane's
spec changes, `lanes retry` clears it, or its retry is due.

`after:` in a lane file orders lanes where it matters otherwise: a lane is applied once the lanes it
names finished their transaction in the same cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from reconciler.plan.steps import Cause, LanePlan, RemoveEnvFiles, Swap
from reconciler.spec.lane import Lane

TAKING = frozenset({"deploy", "verify"})
"""Plans that start ranks on hosts, or gate ranks started before a restart: the taking side of a swap."""
FAILED_TAKER = frozenset({Cause.CONDEMNED, Cause.BACKOFF})


@dataclass(frozen=True)
class Stopped:
    """A lane the journal says was stopped at `commit`, and where its last healthy spec ran."""

    commit: str
    hosts: tuple[str, ...]
    env_files: tuple[tuple[str, str], ...] = ()  # (host, path) of its last healthy spec's ranks


def _overlap(a: LanePlan, b: LanePlan) -> bool:
    return bool(set(a.hosts) & set(b.hosts))


def find_swaps(
    lane_plans: Sequence[LanePlan],
    stopped: Mapping[str, Stopped] | None = None,
    ready: Mapping[str, str] | None = None,
) -> tuple[list[LanePlan], tuple[Swap, ...]]:
    """Group stops and deploys that share hosts into swaps; the giving lanes keep their env files for now.

    A lane already stopped at this commit, whose hosts a lane takes that never passed its gate with this
    spec, gives them too: the swap began before a restart (the daemon killed or stopped while the taking
    lane loaded), and must still be undone if the taking lane fails.
    """
    stopped, ready = stopped or {}, ready or {}
    takes = [lp for lp in lane_plans if lp.action in TAKING]
    unproven = [lp for lp in takes if ready.get(lp.lane) != lp.fingerprint]
    stops = [lp for lp in lane_plans if lp.action == "stop"]
    for lp in lane_plans:
        was = stopped.get(lp.lane)
        if lp.action != "noop" or lp.cause != Cause.NOTHING_RUNS or was is None or was.commit != lp.commit:
            continue
        gave = replace(lp, hosts=was.hosts)
        if any(_overlap(gave, t) for t in unproven):
            stops.append(gave)
    groups: list[tuple[set[str], set[str], set[str]]] = []  # (giving, taking, hosts)
    for lp, gives in [*((lp, True) for lp in stops), *((lp, False) for lp in takes)]:
        giving, taking = ({lp.lane}, set()) if gives else (set(), {lp.lane})
        merged = (giving, taking, set(lp.hosts))
        rest = []
        for group in groups:
            if group[2] & merged[2]:
                merged = (merged[0] | group[0], merged[1] | group[1], merged[2] | group[2])
            else:
                rest.append(group)
        groups = [*rest, merged]
    swaps: list[Swap] = []
    by_name = {lp.lane: lp for lp in lane_plans}
    out = list(lane_plans)
    for giving, taking, hosts in groups:
        if not giving or not taking:
            continue
        remove: list[tuple[str, str]] = []
        for name in sorted(giving):
            lp = by_name[name]
            if lp.action == "noop":  # stopped before a restart: its env files were kept for this swap
                remove += stopped[name].env_files
                continue
            remove += [f for step in lp.steps if isinstance(step, RemoveEnvFiles) for f in step.files]
            kept = tuple(step for step in lp.steps if not isinstance(step, RemoveEnvFiles))
            out[out.index(lp)] = replace(lp, steps=kept)
        swaps.append(Swap(tuple(sorted(giving)), tuple(sorted(taking)), tuple(sorted(hosts)), tuple(remove)))
    return out, tuple(sorted(swaps, key=lambda s: s.hosts))


def hold_failed_swaps(lane_plans: Sequence[LanePlan], swapped: frozenset[str] = frozenset()) -> list[LanePlan]:
    """A giving lane whose hosts a held-back failed lane would take keeps serving; lanes that would take
    the hosts it keeps wait with it (to a fixed point: holding one may hold another).

    Only a failed lane whose failure undid a swap (`swapped`) holds anything: a lane that failed its own
    rollout on hosts it shares keeps no other lane from starting or stopping there.
    """
    out = list(lane_plans)
    failed = [lp for lp in out if lp.action == "blocked" and lp.cause in FAILED_TAKER and lp.lane in swapped]
    held: list[LanePlan] = []
    changed = True
    while changed:
        changed = False
        for i, lp in enumerate(out):
            if lp.action not in {"stop", *TAKING}:
                continue
            # A stop gives hosts to the failed lane; a start takes hosts a held giving lane keeps.
            holders = [*failed, *held] if lp.action == "stop" else held
            by = [h for h in holders if h.lane != lp.lane and _overlap(h, lp)]
            if not by:
                continue
            out[i] = _held(lp, by, failed)
            held.append(out[i])
            changed = True
    return out


def _held(lp: LanePlan, by: list[LanePlan], failed: list[LanePlan]) -> LanePlan:
    names = ", ".join(sorted({f.lane for f in failed if _overlap(f, lp)} or {h.lane for h in by}))
    retry = " or `lanes retry <lane>`" if any(f.cause == Cause.CONDEMNED for f in failed) else ""
    if lp.action == "stop":
        why = (
            f"keeps serving on {', '.join(lp.hosts)}: the swap to {names} failed and was rolled back; "
            f"it stops when the swap runs again (a new spec of {names}{retry}, or its retry when due)"
        )
    else:
        why = (
            f"waits: {', '.join(sorted(h.lane for h in by))} still serves on its hosts after the swap to "
            f"{names} failed and was rolled back"
        )
    return replace(lp, action="blocked", reason=why, steps=(), cause=Cause.SWAP_HELD)


def order_after(lane_plans: Sequence[LanePlan], lanes: Mapping[str, Lane]) -> list[LanePlan]:
    """Stops first (a lane moving onto hosts another lane leaves needs them free), then each lane after
    the changing lanes its `after:` names, then by name. The loader refuses cycles (`spec.lane`)."""
    changing = {lp.lane for lp in lane_plans if lp.changes}
    with_after = []
    for lp in lane_plans:
        lane = lanes.get(lp.lane)
        named = (*lp.after, *(lane.after if lane else ()))  # the rollout's own order first (one replica at a time)
        deps = tuple(d for d in dict.fromkeys(named) if d in changing and d != lp.lane)
        with_after.append(replace(lp, after=deps) if lp.changes and deps else lp)
    by_name = {lp.lane: lp for lp in with_after}
    depth: dict[str, int] = {}

    def level(name: str, seen: frozenset[str] = frozenset()) -> int:
        if name not in depth:
            lp = by_name.get(name)
            deps = [d for d in (lp.after if lp else ()) if d not in seen]
            depth[name] = 1 + max((level(d, seen | {name}) for d in deps), default=-1)
        return depth[name]

    return sorted(with_after, key=lambda lp: (lp.action != "stop", level(lp.lane), lp.lane))
