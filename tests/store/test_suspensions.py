"""Runtime holds in the journal: each suspend and resume one row, the newest deciding, who and why kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.store.journal import Store
from reconciler.store.status import status_rows, suspension_text
from reconciler.store.suspensions import MAX_REASON, resume, suspend, suspension_history, suspensions
from tests.support.example import EUGR, PRODUCTION, example_state

pytestmark = pytest.mark.timeout(30)


def test_suspend_resume_and_the_history_of_both(tmp_path: Path) -> None:
    store = Store(tmp_path / "lanes.db")
    assert suspensions(store) == {} and suspension_history(store) == []  # no table yet: no holds, no error
    held = suspend(store, EUGR, "alice", "swapping\nthe NIC on dgx6")
    assert (held.by, held.reason) == ("alice", "swapping the NIC on dgx6")  # one line: it goes into tables
    assert set(suspensions(store)) == {EUGR}
    row = {r["name"]: r for r in status_rows(store, example_state())}[EUGR]
    assert row["suspended"] is True and row["suspension"]["by"] == "alice"
    assert suspension_text(row).startswith("suspended by alice at ") and f"`lanes resume {EUGR}`" in suspension_text(
        row
    )
    assert {r["name"]: r for r in status_rows(store, example_state())}[PRODUCTION]["suspension"] is None
    assert resume(store, EUGR, "bob") is not None
    assert suspensions(store) == {} and resume(store, EUGR, "bob") is None  # resuming twice records nothing
    assert [(h["action"], h["by"]) for h in suspension_history(store, EUGR)] == [
        ("suspend", "alice"),
        ("resume", "bob"),
    ]
    with pytest.raises(ValueError, match="reason"):
        suspend(store, EUGR, "alice", "  ")
    assert len(suspend(store, EUGR, "alice", "x" * 10_000).reason) == MAX_REASON
    store.close()
