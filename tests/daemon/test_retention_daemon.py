"""The daemon in this process prunes its journal at start: old rows go, the lanes it runs keep their records."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from reconciler.store.journal import Store
from reconciler.store.retention import DAY_S
from tests.support.example import EUGR, PRODUCTION

from .test_daemon_loop import start, stop

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


async def test_the_daemon_prunes_old_rows_at_start(tmp_path: Path) -> None:
    old = time.time() - 400 * DAY_S
    store = Store(tmp_path / "daemon.db")
    for i in range(5):
        row = {"run": f"old{i}", "lane": "gone-lane", "commit": f"c{i}", "result": "rolled-back"}
        store.db.table("applies").insert({**row, "started": old, "finished": old}, alter=True)
        step = {"run": f"old{i}", "lane": "gone-lane", "state": "done", "started": old, "finished": old}
        store.db.table("journal").insert(step)
        store.db.table("commits").insert({"sha": f"c{i}", "outcome": "applied", "detail": "{}", "time": old + i})
    store.close()
    running = await start(tmp_path, append="\n[retention]\njournal_days = 1\napplies_days = 1\ncommits_days = 1\n")
    try:
        after = Store(tmp_path / "daemon.db")
        applies = after.applies(limit=1000)
        assert [r["commit"] for r in applies if r["lane"] == "gone-lane"] == ["c4"]  # the lane's newest stays
        assert {r["lane"] for r in applies} >= {EUGR, PRODUCTION}
        assert [r["run"] for r in after.journal("gone-lane")] == ["old4"]
        shas = {r["sha"] for r in after.db.table("commits").rows}
        assert shas & {"c0", "c1", "c2", "c3", "c4"} == {"c4"}  # the newest decision at the prune stays
    finally:
        await stop(running)
