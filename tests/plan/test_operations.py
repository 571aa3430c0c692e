"""A plan cut into operations: what moves together stays together, what is in flight is left alone."""

from __future__ import annotations

import pytest

from reconciler.plan.operations import preemptions, split_plan, supersedes
from reconciler.plan.steps import AcquireLeases, LanePlan, Plan, Swap

pytestmark = pytest.mark.timeout(10)


def lane(
    name: str, action: str, hosts: tuple[str, ...], fp: str | None = "f1", after: tuple[str, ...] = ()
) -> LanePlan:
    steps = (AcquireLeases(hosts),) if action in {"deploy", "verify", "stop"} else ()
    return LanePlan(name, action, "", steps, fp, hosts=hosts, commit="c", after=after)  # type: ignore[arg-type]


def groups(plan: Plan, busy: tuple[str, ...] = ()) -> list[list[str]]:
    return sorted(sorted(lp.lane for lp in op.lanes) for op in split_plan(plan, busy).operations)


def test_independent_changes_are_operations_of_their_own_and_observations_stay_with_the_cycle() -> None:
    plan = Plan("c", (lane("a", "deploy", ("h1",)), lane("b", "deploy", ("h2",)), lane("c", "noop", ("h3",))))
    split = split_plan(plan, ())
    assert groups(plan) == [["a"], ["b"]]
    assert [lp.lane for lp in split.observe.lanes] == ["c"]


def test_shared_hosts_after_and_swaps_bind_lanes_into_one_operation() -> None:
    plan = Plan(
        "c",
        (
            lane("a", "deploy", ("h1", "h2")),
            lane("b", "deploy", ("h2",)),
            lane("c", "deploy", ("h5",), after=("d",)),
            lane("d", "deploy", ("h6",)),
            lane("give", "noop", ("h7",)),  # stopped before a restart: it gives its hosts as a noop
            lane("take", "verify", ("h7",)),
        ),
        swaps=(Swap(("give",), ("take",), ("h7",)),),
    )
    assert groups(plan) == [["a", "b"], ["c", "d"], ["give", "take"]]
    swap_op = next(op for op in split_plan(plan, ()).operations if op.lane("take") is not None)
    assert swap_op.swaps == plan.swaps


def test_a_lane_in_flight_is_left_out_and_what_moves_with_it_waits() -> None:
    plan = Plan(
        "c",
        (
            lane("busy", "deploy", ("h1",)),
            lane("sharer", "deploy", ("h1",)),
            lane("follower", "deploy", ("h9",), after=("busy",)),
            lane("free", "deploy", ("h3",)),
        ),
    )
    split = split_plan(plan, ("busy",))
    assert groups(plan, ("busy",)) == [["free"]]
    assert split.deferred == ("follower", "sharer")
    assert [lp.lane for lp in split.observe.lanes] == []


def test_a_newer_plan_preempts_only_what_it_wants_otherwise() -> None:
    assert supersedes(lane("x", "deploy", ("h",), "f2"), "f1", "deploy")  # another spec
    assert supersedes(lane("x", "stop", ("h",), None), "f1", "deploy")  # stopped now
    assert not supersedes(lane("x", "verify", ("h",), "f1"), "f1", "deploy")  # its own half-started ranks
    assert not supersedes(lane("x", "denied", ("h",), "f2"), "f1", "deploy")  # a refusal asks for nothing
    assert not supersedes(lane("x", "stop", ("h",), None), None, "stop")
    plan = Plan("c", (lane("x", "deploy", ("h",), "f2"), lane("y", "verify", ("g",), "f1")))
    assert preemptions(plan, {"x": ("f1", "deploy"), "y": ("f1", "deploy"), "gone": ("f1", "deploy")}) == ["x"]


def test_a_group_on_a_host_held_beside_the_plan_waits() -> None:
    # A lane moving from h1 to h2 touches both (its lease covers h1); h1 is held by a trial on spare hosts.
    mover = LanePlan("mover", "deploy", "", (AcquireLeases(("h1", "h2")),), "f1", hosts=("h2",), commit="c")
    plan = Plan("c", (mover, lane("sharer", "deploy", ("h2",)), lane("free", "deploy", ("h3",))))
    split = split_plan(plan, (), held=("h1",))
    assert [sorted(lp.lane for lp in op.lanes) for op in split.operations] == [["free"]]
    assert split.deferred == ("mover", "sharer")
