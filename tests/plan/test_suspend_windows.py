"""The planner with a suspended lane and with change windows: what it leaves alone, what waits, what never does."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from reconciler.facts.observed import ObservedFleet
from reconciler.plan import Cause, DriftKind
from reconciler.spec.load import DesiredState
from reconciler.spec.windows import ChangeWindow, WindowsFile
from tests.support.example import EUGR, PRODUCTION, example_state, with_lane
from tests.support.planfleet import NEW_IMAGE, converge, empty_fleet, lane_of, run

pytestmark = pytest.mark.timeout(30)

# 22:00-01:00 Berlin on weeknights; in December that is 21:00-00:00 UTC.
NIGHTS = WindowsFile(
    windows={
        "nights": ChangeWindow(
            cron="0 22 * * mon-fri", timezone="Europe/Berlin", duration_minutes=180, lanes=(PRODUCTION,)
        )
    }
)
TUESDAY_NOON = datetime(2026, 12, 1, 12, 0, tzinfo=UTC).timestamp()
TUESDAY_NIGHT = datetime(2026, 12, 1, 21, 0, tzinfo=UTC).timestamp()
"""When the window opens after TUESDAY_NOON; one second inside it is open too."""


def without_rank(observed: ObservedFleet, hostname: str, lane: str) -> ObservedFleet:
    """The fleet with `lane`'s container on `hostname` removed by hand."""
    h = observed.hosts[hostname]
    kept = tuple(c for c in h.containers if not c.name.startswith(f"lanes-{lane}-"))
    return ObservedFleet({**observed.hosts, hostname: replace(h, containers=kept)})


def suspended(state: DesiredState, lane: str, **more: Any) -> DesiredState:
    return with_lane(state, lane, suspended=True, **more)


def test_a_suspended_lane_with_a_rank_removed_by_hand_is_left_as_it_is_and_says_so() -> None:
    desired = example_state()
    _, applied = converge(desired)
    drifted = without_rank(applied, "dgx7", EUGR)
    held = lane_of(run(suspended(desired, EUGR), drifted), EUGR)
    assert (held.action, held.cause, held.steps) == ("suspended", Cause.SUSPENDED, ())
    assert [(d.kind, d.host) for d in held.drift] == [(DriftKind.MISSING, "dgx7")]
    assert f"lanes-{EUGR}-r2 missing on dgx7" in held.reason
    # Lifted: the same observation is repaired.
    repaired = lane_of(run(desired, drifted), EUGR)
    assert (repaired.action, repaired.cause) == ("deploy", Cause.DRIFT)


@pytest.mark.parametrize("change", ["image", "first-deploy", "stopped"])
def test_a_suspended_lane_gets_no_steps_whatever_changed(change: str) -> None:
    desired = example_state()
    _, applied = converge(desired)
    if change == "image":
        state, observed = suspended(desired, PRODUCTION, image=NEW_IMAGE), applied
    elif change == "first-deploy":
        state, observed = suspended(desired, PRODUCTION), empty_fleet(desired)
    else:
        state, observed = suspended(desired, PRODUCTION, desired="stopped"), applied
    lp = lane_of(run(state, observed), PRODUCTION)
    assert (lp.action, lp.steps) == ("suspended", ())
    # Without the flag each of these has steps.
    assert lane_of(run(with_lane(state, PRODUCTION, suspended=False), observed), PRODUCTION).steps


def test_a_restarting_change_outside_its_window_waits_until_the_window_opens() -> None:
    desired = example_state()
    _, applied = converge(desired)
    bumped = with_lane(desired, PRODUCTION, image=NEW_IMAGE)
    result = run(bumped, applied, windows=NIGHTS, window_clock=TUESDAY_NOON)
    prod = lane_of(result, PRODUCTION)
    assert (prod.action, prod.cause, prod.steps) == ("blocked", Cause.CHANGE_WINDOW, ())
    assert prod.held_until == TUESDAY_NIGHT
    assert "held until 2026-12-01T21:00:00Z" in prod.reason and "'nights'" in prod.reason
    # Inside the window, or with a person's override, the same change goes.
    overrides: tuple[dict[str, Any], ...] = (
        {"window_clock": TUESDAY_NIGHT + 1},
        {"window_clock": TUESDAY_NOON, "window_override": True},
    )
    for options in overrides:
        lp = lane_of(run(bumped, applied, windows=NIGHTS, **options), PRODUCTION)
        assert (lp.action, lp.cause, lp.held_until) == ("deploy", Cause.SPEC_CHANGED, None)


def test_the_window_falls_back_to_the_planners_clock() -> None:
    desired = example_state()
    _, applied = converge(desired)
    bumped = with_lane(desired, PRODUCTION, image=NEW_IMAGE)
    assert lane_of(run(bumped, applied, windows=NIGHTS, clock=TUESDAY_NOON), PRODUCTION).action == "blocked"
    assert lane_of(run(bumped, applied, windows=NIGHTS, clock=TUESDAY_NIGHT), PRODUCTION).action == "deploy"


def test_a_lane_file_can_name_its_window() -> None:
    desired = example_state()
    _, applied = converge(desired)
    unselected = WindowsFile(windows={"nights": NIGHTS.windows["nights"].model_copy(update={"lanes": ()})})
    bumped = with_lane(desired, EUGR, image=NEW_IMAGE)
    assert lane_of(run(bumped, applied, windows=unselected, window_clock=TUESDAY_NOON), EUGR).action == "deploy"
    named = with_lane(bumped, EUGR, change_window="nights")
    lp = lane_of(run(named, applied, windows=unselected, window_clock=TUESDAY_NOON), EUGR)
    assert (lp.action, lp.held_until) == ("blocked", TUESDAY_NIGHT)


def test_what_never_waits_for_a_window() -> None:
    desired = example_state()
    _, applied = converge(desired)
    at: dict[str, Any] = {"windows": NIGHTS, "window_clock": TUESDAY_NOON}
    # A first start: nothing of the lane runs.
    assert lane_of(run(desired, empty_fleet(desired), **at), PRODUCTION).action == "deploy"
    # A stop.
    stop = lane_of(run(with_lane(desired, PRODUCTION, desired="stopped"), applied, **at), PRODUCTION)
    assert stop.action == "stop"
    # The repair of a rank that went missing while the others run the desired spec.
    repair = lane_of(run(desired, without_rank(applied, "dgx3", PRODUCTION), **at), PRODUCTION)
    assert (repair.action, repair.cause) == ("deploy", Cause.DRIFT)
    # A gate of the spec that already runs (its readiness never seen).
    assert lane_of(run(desired, applied, ready={}, **at), PRODUCTION).action == "verify"
    # A lane under no window, in the same cycle as a held one.
    both = with_lane(with_lane(desired, PRODUCTION, image=NEW_IMAGE), EUGR, image=NEW_IMAGE)
    result = run(both, applied, **at)
    assert (lane_of(result, PRODUCTION).action, lane_of(result, EUGR).action) == ("blocked", "deploy")
    # A change to ranks that all exited restarts nothing that runs.
    exited = {
        name: replace(h, containers=tuple(replace(c, state="exited") for c in h.containers))
        for name, h in applied.hosts.items()
    }
    stopped_change = lane_of(run(both, ObservedFleet(exited), **at), PRODUCTION)
    assert stopped_change.action == "deploy"
