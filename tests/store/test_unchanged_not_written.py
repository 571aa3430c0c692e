"""A look that changes nothing writes nothing (issue 27: every no-op resync wrote every lane's row again).

The one writer runs the events through the lane machine and writes the row only when the state it ends in
differs from the row's; a held lane's reason, said again at every look, keeps when it was first said.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.lane import Blocked, LaneHealth, Observed, Seen, Wanted
from reconciler.store.journal import Store
from reconciler.store.lanewriter import record

pytestmark = pytest.mark.timeout(30)
WANTED = Wanted("running", "c0ffee", ("dgx1",))


def writes(store: Store) -> int:
    """Rows sqlite changed through this connection so far."""
    return store.db.conn.total_changes


def test_a_healthy_lane_seen_ready_again_is_not_written_again(tmp_path: Path) -> None:
    store = Store(tmp_path / "lanes.db")
    try:
        record(store, "prod", Observed(seen=Seen.READY, wanted=WANTED), now=100.0)
        row = store.lane("prod")
        assert row is not None and row.health == LaneHealth.HEALTHY
        before = writes(store)
        state, _ = record(store, "prod", Observed(seen=Seen.READY, wanted=WANTED), now=200.0)
        assert state.health == LaneHealth.HEALTHY
        assert writes(store) == before
        assert store.lane("prod") is row  # the row, and its `updated`, as written the first time
        # A change is written: the engine stops answering.
        record(store, "prod", Observed(seen=Seen.NOT_ANSWERING, why="no answer"), now=300.0)
        assert writes(store) == before + 1
        after = store.lane("prod")
        assert after is not None and (after.health, after.last_error) == (LaneHealth.DEGRADED, "no answer")
    finally:
        store.close()


def test_the_same_reason_said_again_keeps_its_time_and_is_not_written(tmp_path: Path) -> None:
    store = Store(tmp_path / "lanes.db")
    try:
        record(store, "prod", Observed(seen=Seen.READY, wanted=WANTED), now=100.0)
        window = Blocked(by="change window", until=900.0, why="held until the window opens", wanted=WANTED)
        record(store, "prod", window, now=200.0)
        first = store.lane("prod")
        assert first is not None and first.error_at == 200.0
        before = writes(store)
        record(store, "prod", window, now=300.0)
        assert writes(store) == before
        assert store.lane("prod") is first
        # Other words are news: said, with their own time.
        record(store, "prod", Blocked(by="change window", until=900.0, why="another reason", wanted=WANTED), now=400.0)
        again = store.lane("prod")
        assert again is not None and (again.last_error, again.error_at) == ("another reason", 400.0)
    finally:
        store.close()


def test_timings_and_drift_are_written_even_when_the_state_is_the_same(tmp_path: Path) -> None:
    store = Store(tmp_path / "lanes.db")
    try:
        record(store, "prod", Observed(seen=Seen.READY, wanted=WANTED), now=100.0)
        record(store, "prod", Observed(seen=Seen.READY, wanted=WANTED), now=200.0, timings={"total": 1.5})
        row = store.lane("prod")
        assert row is not None and row.timings == {"total": 1.5}
    finally:
        store.close()
