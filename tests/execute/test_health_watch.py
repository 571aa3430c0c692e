"""Which kept health answers a cycle uses and which engines a round asks (`reconciler.execute.health`).

A clock of the test's own: fresh and due are decided at given instants, nothing waits.
"""

from __future__ import annotations

import pytest

from reconciler.execute.health import Answer, Engine, HealthWatch
from reconciler.spec.lane import Health

pytestmark = pytest.mark.timeout(30)

ENGINE = Engine("fp1", "10.0.0.5", 8000, Health())


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def watch(interval_s: float | None = 60.0) -> tuple[HealthWatch, Clock]:
    clock = Clock()
    w = HealthWatch(interval_s, clock)
    w.watched["prod"] = ENGINE
    w.answers["prod"] = Answer(ENGINE, None, 0.0)
    return w, clock


def test_an_answer_is_fresh_for_two_intervals_about_the_same_engine_only() -> None:
    w, clock = watch()
    clock.now = 119.0
    assert w.fresh("prod", ENGINE) == Answer(ENGINE, None, 0.0)
    clock.now = 120.0
    assert w.fresh("prod", ENGINE) is None  # the round should have asked by now: the cycle asks
    clock.now = 1.0
    moved = Engine("fp1", "10.0.0.6", 8000, Health())
    assert w.fresh("prod", moved) is None  # the lane's head moved
    assert w.fresh("prod", Engine("fp2", "10.0.0.5", 8000, Health())) is None  # a new spec (just converged)
    assert w.fresh("other", ENGINE) is None  # never asked (the daemon just started)


def test_without_a_cadence_nothing_is_fresh_and_nothing_is_due() -> None:
    w, _ = watch(None)  # `lanes plan`, `lanes apply`: every cycle asks every engine
    assert w.fresh("prod", ENGINE) is None
    assert w.due(0) == {} and w.tick_s is None


def test_each_lane_is_asked_once_an_interval_in_its_own_slice() -> None:
    w, clock = watch()
    assert (w.slices, w.tick_s) == (6, 10.0)
    for n in range(60):
        w.watched[f"lane-{n}"] = Engine(f"fp{n}", f"10.0.1.{n}", 8000, Health())
        w.answers[f"lane-{n}"] = Answer(w.watched[f"lane-{n}"], None, 0.0)
    asked: dict[str, list[int]] = {}
    for tick in range(12):  # two intervals of rounds
        clock.now = 10.0 * (tick + 1)
        for lane, engine in w.due(tick).items():
            asked.setdefault(lane, []).append(tick)
            w.answers[lane] = Answer(engine, None, clock.now)
    assert sorted(asked) == sorted(w.watched)
    assert all(ticks[1] - ticks[0] == 6 and len(ticks) == 2 for ticks in asked.values()), asked
    per_round = [sum(tick in ticks for ticks in asked.values()) for tick in range(6)]
    assert all(0 < n < 60 for n in per_round), per_round  # spread over the rounds, not one burst


def test_a_lane_a_cycle_just_asked_waits_and_one_a_round_missed_is_asked_at_once() -> None:
    w, clock = watch()
    clock.now = 10.0
    [mine] = [t for t in range(6) if "prod" in w.due(t)]  # its answer 10 s old: only its own slice asks
    clock.now = 1.0  # a cycle asked it half a second ago: not again in its slice's round
    w.answers["prod"] = Answer(ENGINE, None, 0.5)
    assert "prod" not in w.due(mine)
    clock.now = 70.5  # older than an interval and a round: whatever the slice
    assert all("prod" in w.due(t) for t in range(6))
    w.watched["new"] = Engine("fp9", "10.0.0.9", 8000, Health())  # watched, no answer about it yet: asked
    assert all("new" in w.due(t) for t in range(6))
    w.forget({"prod"})  # changed, held or in flight: no longer asked, and asked afresh once in sync
    assert "prod" not in w.due(0) and "prod" not in w.answers


def test_a_short_interval_has_fewer_rounds_never_one_a_second_more() -> None:
    assert (HealthWatch(1.0).slices, HealthWatch(1.0).tick_s) == (1, 1.0)
    assert (HealthWatch(3.0).slices, HealthWatch(3.0).tick_s) == (3, 1.0)
    assert HealthWatch(600.0).tick_s == 100.0
