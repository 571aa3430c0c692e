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
    assert w.due() == {}


def test_the_round_asks_answers_half_an_interval_old_and_forgotten_lanes_never() -> None:
    w, clock = watch()
    w.watched["new"] = Engine("fp9", "10.0.0.9", 8000, Health())  # watched, no answer yet
    clock.now = 29.0
    assert set(w.due()) == {"new"}
    clock.now = 30.0
    assert set(w.due()) == {"new", "prod"}
    w.forget({"prod"})  # changed, held or in flight: no longer asked, and asked afresh once in sync
    assert set(w.due()) == {"new"} and "prod" not in w.answers
