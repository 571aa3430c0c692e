"""A lane suspended at runtime (`lanes suspend`: a person's hold in its state, `SuspendedBy`) is planned exactly
like one whose lane file says `suspended: true`: no steps, whatever changed, and the reason says who held it."""

from __future__ import annotations

import pytest

from reconciler.lane import LANE_FILE, SuspendedBy
from reconciler.plan import Cause
from tests.support.example import PRODUCTION, example_state, with_lane
from tests.support.planfleet import NEW_IMAGE, converge, empty_fleet, lane_of, run

pytestmark = pytest.mark.timeout(30)
WHY = "suspended at runtime by alice: swapping a NIC (`lanes resume dsv41-flash-1017-4x-sglang` lifts it)"


@pytest.mark.parametrize("change", ["image", "first-deploy", "stopped"])
def test_a_lane_held_at_runtime_gets_no_steps_whatever_changed(change: str) -> None:
    desired = example_state()
    _, applied = converge(desired)
    if change == "image":
        state, observed = with_lane(desired, PRODUCTION, image=NEW_IMAGE), applied
    elif change == "first-deploy":
        state, observed = desired, empty_fleet(desired)
    else:
        state, observed = with_lane(desired, PRODUCTION, desired="stopped"), applied
    hold = SuspendedBy("alice", "swapping a NIC", since=1.0)
    held = lane_of(run(state, observed, suspended={PRODUCTION: hold}), PRODUCTION)
    assert (held.action, held.cause, held.steps) == ("suspended", Cause.SUSPENDED, ())
    assert held.reason.startswith(WHY + ": what runs is left as it is")
    # Not held: each of these has steps. A lane-file hold left in the state holds nothing once the file
    # no longer says so (the file decides that one).
    assert lane_of(run(state, observed), PRODUCTION).steps
    assert lane_of(run(state, observed, suspended={PRODUCTION: SuspendedBy(LANE_FILE, "old")}), PRODUCTION).steps
