"""A plan cut into lane operations that can run apart from each other and from the cycle.

A lane change is long (a real engine loads for ten minutes), so the daemon runs each change as an
operation of its own and never waits for it: a change to one lane must not wait behind another
lane's readiness gate. What must move together stays one operation: the lanes of a swap (giving
lanes stop so that taking lanes can start), a lane and the lanes its `after:` names, and lanes that
share a host (their steps on that host are serial anyway). What only looks (a lane in sync, denied,
blocked, held) is not an operation: the cycle does it at once.

A lane whose operation is still in flight when a newer cycle plans it is left out of that cycle,
and so is anything bound to it. Whether the newer plan wants something else of it (so the operation
is preempted) is `supersedes`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from reconciler.plan.steps import AcquireLeases, LanePlan, Plan

ACTING = frozenset({"deploy", "verify", "stop"})
"""Plan actions that run a transaction on hosts (everything else is observed by the cycle itself)."""


@dataclass(frozen=True)
class Split:
    """A plan cut for the daemon: what the cycle observes now, what starts as operations, what waits."""

    observe: Plan
    operations: tuple[Plan, ...]
    deferred: tuple[str, ...]
    """Lanes left out because a lane they move with is in flight: planned again once it ends."""


def touched_hosts(lp: LanePlan) -> frozenset[str]:
    """The hosts a lane's plan runs on or changes: its own, and those its leases cover (where it moves from)."""
    return frozenset(lp.hosts).union(*(s.hosts for s in lp.steps if isinstance(s, AcquireLeases)))


def split_plan(plan: Plan, busy: Collection[str], restoring: Collection[str] = (), held: Collection[str] = ()) -> Split:
    """Cut `plan` into independent operations, leaving out `busy` lanes (in flight) and what is bound to them.

    `restoring`: lanes a killed daemon left in the middle of a swap undo; their resumption gates a lane, so
    it is an operation, not an observation. `held`: hosts something beside the plan holds (a trial on spare
    hosts, `reconciler.execute.trials`): a group acting on one waits, as one bound to a busy lane does.
    """
    by_name = {lp.lane: lp for lp in plan.lanes}
    parent = {lp.lane: lp.lane for lp in plan.lanes}

    def root(lane: str) -> str:
        while parent[lane] != lane:
            parent[lane] = parent[parent[lane]]
            lane = parent[lane]
        return lane

    def join(a: str, b: str) -> None:
        if a in parent and b in parent:
            parent[root(a)] = root(b)

    # A swap's lanes are one operation whatever their own action: a lane stopped before a restart gives its
    # hosts as a noop (`reconciler.plan.swaps.find_swaps`), and the swap's undo must bring it back.
    swapping = {lane for swap in plan.swaps for lane in (*swap.giving, *swap.taking)}
    acting = {lp.lane for lp in plan.lanes if lp.action in ACTING or lp.lane in restoring or lp.lane in swapping}
    for swap in plan.swaps:
        first, *others = [*swap.giving, *swap.taking]
        for other in others:
            join(first, other)
    for lp in plan.lanes:
        if lp.lane not in acting:
            continue
        for dep in lp.after:
            join(lp.lane, dep)
    owner: dict[str, str] = {}
    for lane in sorted(acting):
        for host in by_name[lane].hosts:
            if host in owner:
                join(lane, owner[host])
            else:
                owner[host] = lane
    groups: dict[str, list[str]] = {}
    for lane in sorted(acting):
        groups.setdefault(root(lane), []).append(lane)
    busy_set = set(busy)
    # Swaps and `after:` can bind an observed lane to an acting one too: a group reaching a busy lane waits.
    bound: dict[str, set[str]] = {}
    for swap in plan.swaps:
        swapping = {*swap.giving, *swap.taking}
        for m in swapping:
            bound.setdefault(m, set()).update(swapping)
    for lp in plan.lanes:
        for dep in lp.after:
            bound.setdefault(lp.lane, set()).add(dep)
    deferred: list[str] = []
    operations: list[Plan] = []
    held_set = set(held)
    for members in groups.values():
        reach = set(members).union(*(bound.get(m, set()) for m in members))
        if reach & busy_set or any(touched_hosts(by_name[m]) & held_set for m in members):
            deferred.extend(m for m in members if m not in busy_set)
            continue
        lanes = tuple(by_name[m] for m in members)
        swaps = tuple(s for s in plan.swaps if set(s.giving) | set(s.taking) <= set(members))
        operations.append(Plan(plan.commit, lanes, swaps))
    grouped = {m for members in groups.values() for m in members}
    observe = tuple(lp for lp in plan.lanes if lp.lane not in grouped and lp.lane not in busy_set)
    return Split(Plan(plan.commit, observe), tuple(operations), tuple(sorted(deferred)))


def supersedes(newer: LanePlan, target: str | None, action: str) -> bool:
    """Whether a newer plan of a lane in flight wants something other than its operation's `target`.

    `target` is the fingerprint the operation brings up (None: it stops the lane) and `action` its plan's
    action. A newer plan that only observes (denied, blocked, held) leaves the operation alone: the newest
    commit wins by what it asks for, not by what it refuses. A plan for the same spec (the probe sees the
    operation's own half-started ranks) is no change either.
    """
    if newer.action not in ACTING:
        return False
    wanted = None if newer.action == "stop" else newer.fingerprint
    running = None if action == "stop" else target
    return wanted != running


def preemptions(plan: Plan, in_flight: Mapping[str, tuple[str | None, str]]) -> list[str]:
    """Lanes in flight (lane -> (target fingerprint, action)) that `plan` supersedes, sorted."""
    out = []
    for lane, (target, action) in sorted(in_flight.items()):
        lp = plan.lane(lane)
        if lp is not None and supersedes(lp, target, action):
            out.append(lane)
    return out
