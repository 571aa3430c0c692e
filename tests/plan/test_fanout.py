"""The fan-out plan: rounds worked out by hand for small fleets, and the origin's bytes they imply."""

from __future__ import annotations

import itertools

import pytest

from reconciler.plan.fanout import FanoutPlan, Transfer, plan_fanout, split_by_bytes

pytestmark = pytest.mark.timeout(30)

MODEL = {"a.safetensors": 100, "b.safetensors": 50}  # 150 bytes in all
ORIGIN = "nas1"


def everyone(*hosts: str) -> list[tuple[str, str]]:
    return list(itertools.combinations(hosts, 2))


def feeds(plan: FanoutPlan) -> list[list[tuple[str, str]]]:
    return [list(r) for r in plan.feeds()]


def test_three_hosts_that_talk_the_origin_sends_the_model_once_and_holders_double() -> None:
    # Round 1: the origin seeds a (all need 150 bytes: the first by name). Round 2: a feeds b.
    # Round 3: a feeds c; b finds nobody left.
    plan = plan_fanout(dict.fromkeys("abc", MODEL), holders=(), origin=ORIGIN, pairs=everyone("a", "b", "c"))

    assert feeds(plan) == [[(ORIGIN, "a")], [("a", "b")], [("a", "c")]]
    assert plan.bytes_from(ORIGIN) == 150  # one model size
    assert plan.bytes_from("a") == 300 and plan.bytes_from("b") == 0
    assert plan.unreachable == ()
    assert plan.rounds[0] == (Transfer(ORIGIN, "a", ("a.safetensors", "b.safetensors"), 150),)


def test_seven_hosts_that_talk_double_each_round() -> None:
    # Holders 1, 2, 4, 8: rounds of 1, 1, 2, 3 transfers; the origin only in the first.
    hosts = [f"h{i}" for i in range(1, 8)]
    plan = plan_fanout(dict.fromkeys(hosts, MODEL), holders=(), origin=ORIGIN, pairs=everyone(*hosts))

    assert feeds(plan) == [
        [(ORIGIN, "h1")],
        [("h1", "h2")],
        [("h1", "h3"), ("h2", "h4")],
        [("h1", "h5"), ("h2", "h6"), ("h3", "h7")],
    ]
    assert plan.bytes_from(ORIGIN) == 150


def test_three_hosts_that_cannot_talk_are_each_sent_the_model_by_the_origin() -> None:
    plan = plan_fanout(dict.fromkeys("abc", MODEL), holders=(), origin=ORIGIN, pairs=())

    assert feeds(plan) == [[(ORIGIN, "a")], [(ORIGIN, "b")], [(ORIGIN, "c")]]
    assert plan.bytes_from(ORIGIN) == 3 * 150


def test_a_spark_already_holding_the_model_feeds_the_others_and_the_origin_sends_nothing() -> None:
    # Round 1: d (holder) feeds a. Round 2: a feeds b, d feeds c (holders take receivers in name order: a, d).
    plan = plan_fanout(dict.fromkeys("abc", MODEL), holders=("d",), origin=ORIGIN, pairs=everyone("a", "b", "c", "d"))

    assert feeds(plan) == [[("d", "a")], [("a", "b"), ("d", "c")]]
    assert plan.bytes_from(ORIGIN) == 0
    assert plan_fanout(dict.fromkeys("abc", MODEL), holders=("d",), origin=None,
                       pairs=everyone("a", "b", "c", "d")).rounds == plan.rounds  # fmt: skip


def test_the_seed_is_the_host_needing_fewest_bytes_so_the_origin_sends_only_that() -> None:
    # b holds all but one flipped 50-byte file: the origin sends it those 50 bytes, then b feeds a, then a and
    # b feed c... a needs everything, c too: round 2 b -> a, round 3 a -> c (a first by name).
    needs = {"a": MODEL, "b": {"b.safetensors": 50}, "c": MODEL}
    plan = plan_fanout(needs, holders=(), origin=ORIGIN, pairs=everyone("a", "b", "c"))

    assert feeds(plan) == [[(ORIGIN, "b")], [("b", "a")], [("a", "c")]]
    assert plan.bytes_from(ORIGIN) == 50
    assert plan.bytes_to("a") == 150


def test_two_groups_each_get_one_seed_from_the_origin() -> None:
    # {a, b} talk; c is on no data plane. Round 1: origin seeds a (groups by their seed's name: a < c).
    # Round 2: a feeds b, the origin seeds c. Origin: two model sizes.
    plan = plan_fanout(dict.fromkeys("abc", MODEL), holders=(), origin=ORIGIN, pairs=[("a", "b")])

    assert feeds(plan) == [[(ORIGIN, "a")], [("a", "b"), (ORIGIN, "c")]]
    assert plan.bytes_from(ORIGIN) == 300


def test_a_holder_in_another_group_does_not_spare_the_origin_that_group() -> None:
    plan = plan_fanout({"a": MODEL, "b": MODEL}, holders=("d",), origin=ORIGIN, pairs=[("d", "a")])

    assert feeds(plan) == [[("d", "a"), (ORIGIN, "b")]]
    assert plan.bytes_from(ORIGIN) == 150


def test_without_an_origin_a_group_without_a_holder_is_unreachable() -> None:
    plan = plan_fanout({"a": MODEL, "b": MODEL}, holders=("d",), origin=None, pairs=[("d", "a")])

    assert feeds(plan) == [[("d", "a")]]
    assert plan.unreachable == ("b",)


def test_a_receiver_needing_nothing_is_a_holder() -> None:
    plan = plan_fanout({"a": {}, "b": MODEL}, holders=(), origin=ORIGIN, pairs=[("a", "b")])

    assert feeds(plan) == [[("a", "b")]]
    assert plan.bytes_from(ORIGIN) == 0


def test_files_into_one_receiver_split_by_bytes_up_to_the_limit() -> None:
    # Largest first onto the lightest: 70 -> #0 (70), 50 -> #1 (50), 40 -> #1 (90), 30 -> #0 (100),
    # 10 -> #1 (90 < 100: 100). Each list sorted by path.
    files = {"e": 70, "d": 50, "c": 40, "b": 30, "a": 10}
    assert split_by_bytes(files, 2) == [("b", "e"), ("a", "c", "d")]
    assert split_by_bytes(files, 1) == [("a", "b", "c", "d", "e")]
    assert split_by_bytes({"x": 5}, 4) == [("x",)]
    with pytest.raises(ValueError, match="at least 1"):
        split_by_bytes(files, 0)

    plan = plan_fanout({"r": files}, holders=(), origin=ORIGIN, pairs=(), parallel=2)
    assert plan.rounds == ((Transfer(ORIGIN, "r", ("b", "e"), 100), Transfer(ORIGIN, "r", ("a", "c", "d"), 100)),)


def test_the_origin_may_not_be_one_of_the_sparks() -> None:
    with pytest.raises(ValueError, match="among the holders"):
        plan_fanout({"a": MODEL}, holders=("b",), origin="b", pairs=())
