"""A link that stays down through a rollback: the host is asked once more, then skipped, not waited on.

A cut cable swallows commands instead of refusing them, so each one used to wait out its whole timeout,
and a rollback sends several to every host (logs, stop, rm, start). After the first command to a host
fails that way, the rest of the cycle asks it a short `true` first and sends nothing more if it is silent.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support.example import EUGR_HOSTS, FAST_HEALTH, PROD_HOSTS, PROD_REPO, PRODUCTION
from tests.support.waiting import wait_for
from tests.support.world import cycle_world

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


async def test_a_worker_cut_off_during_the_readiness_wait_is_skipped_by_the_rollback(tmp_path: Path) -> None:
    async with cycle_world(tmp_path, 311) as w:
        first = w.heads[0]
        old_image = w.image_of(PRODUCTION)
        eugr_before = w.snapshot(EUGR_HOSTS)
        new_image = w.env.fleet.registry.add(f"{PROD_REPO}:cut-worker", env={"STANDIN_LOAD_S": "30"}).pinned
        # A readiness budget the watcher always beats, however loaded the machine: the case is the cut.
        patient = {**FAST_HEALTH, "ready_timeout_s": 90}
        head = w.commit("production: bump (dgx2's cable is cut)", {PRODUCTION: {"image": new_image, "health": patient}})
        cycle = asyncio.create_task(w.cycle())
        await wait_for(lambda: w.journal_has(PRODUCTION, "wait-ready", head), 60, "the readiness wait", 0.01)
        await w.faults.cut_link("dgx2")
        result = await asyncio.wait_for(cycle, 100)

        res = {r.lane: r for r in result.results}[PRODUCTION]
        error = res.error or ""
        # The watcher saw dgx2 go silent; the rollback restored the three others and sent dgx2 nothing more
        # after a short `true` went unanswered.
        assert res.result == "failed", error
        assert f"lanes-{PRODUCTION}-r1@dgx2 unreachable" in error, error
        assert "restoring the previous spec failed: dgx2: unreachable" in error, error
        assert "still not answering" in error and "so not sent" in error, error
        for rank, host in enumerate(PROD_HOSTS):
            boxes = [(b.name, b.status, b.commit, b.image) for b in w.containers(host)]
            if host == "dgx2":  # behind the cut its new rank runs on, out of reach until the cable is back
                assert boxes == [(f"lanes-{PRODUCTION}-r1", "running", head, new_image)], boxes
            else:
                assert boxes == [(f"lanes-{PRODUCTION}-r{rank}", "running", first, old_image)], (host, boxes)
        assert w.snapshot(EUGR_HOSTS) == eugr_before
        assert w.unfinished_steps() == []

        await w.faults.restore_link("dgx2")
        code, _, err = await w.lanes("retry", PRODUCTION, "--db", str(w.db))
        assert code == 0, err
        # The same digest, its stand-in told to load in a second: the retry need not wait 30 s.
        w.env.fleet.registry.add(f"{PROD_REPO}:cut-worker", env={"STANDIN_LOAD_S": "1"})
        result = await w.cycle()
        assert {r.lane: r.result for r in result.results}[PRODUCTION] == "applied"
        assert w.lane_runs(PRODUCTION, PROD_HOSTS, head, new_image)
