"""Health is observed, not inferred: the daemon as a real process, killed during a readiness wait.

Before: a daemon killed (SIGKILL) while a lane waited for readiness came back, saw the new
containers running with the desired spec, called the lane in sync and marked it healthy without
asking the engine, which never became ready. Now an in-sync spec whose readiness was never observed
is gated again, and rolled back when it fails; and a removed rank's repair says what drifted.
"""

from __future__ import annotations

import itertools
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.example import EUGR, PROD_HOSTS, PRODUCTION
from tests.support.waiting import wait_for
from tests.support.world import World, daemon_world

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
_salt = itertools.count(151)


def images(world: World, lane: str, hosts: tuple[str, ...]) -> list[str]:
    """The images of the lane's running containers on `hosts`, host by host."""
    return [
        b.image
        for host in hosts
        for b in world.containers(host)
        if b.name.startswith(f"lanes-{lane}-") and b.status == "running"
    ]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    """The daemon as a process over the example fleet, converged at the first commit; its log says what it did."""
    async with daemon_world(tmp_path, next(_salt), connect_timeout_s=None, log_level="info") as w:
        yield w


async def test_sigkill_during_the_wait_of_a_never_ready_engine_ends_rolled_back(world: World) -> None:
    first = world.health(PRODUCTION)[1]
    old_images = images(world, PRODUCTION, PROD_HOSTS)
    broken = world.fleet.registry.add(
        "aidendle94/sparkrun-sglang-dsv41-gb10:never", env={"STANDIN_NEVER_HEALTHY": "1"}
    ).pinned
    head = world.commit("production: an engine that never gets ready", {PRODUCTION: {"image": broken}})
    await wait_for(lambda: world.in_step(PRODUCTION, "wait-ready"), 30, "the readiness wait", 0.01)
    assert await world.daemon.stop(signal.SIGKILL, timeout=30) == -signal.SIGKILL
    assert images(world, PRODUCTION, PROD_HOSTS) == [broken] * 4  # the never-ready ranks run, in sync
    await world.daemon.start()
    # Never 'healthy' for the broken spec: it is gated again, fails, and the old spec comes back.
    seen: set[str | None] = set()

    def settled() -> bool:
        health = world.health(PRODUCTION)
        seen.add(health[0])
        return health == ("degraded", first)

    await wait_for(settled, 90, "the re-gate to fail and roll back", 0.05)
    # Not once, from the restart to the rollback, did the lane read healthy; and no apply of the broken
    # commit ended applied or verified (what the polling could miss between two looks, the journal keeps).
    assert "healthy" not in seen, seen
    assert not [a["result"] for a in world.applies(PRODUCTION, head) if a["result"] in ("applied", "verified")]
    lane = world.lane_row(PRODUCTION)
    error = lane["last_error"]
    assert "readiness gate failed at stage 'health'" in str(error) and "rolled back to" in str(error)
    assert lane["failed_fingerprint"]  # condemned: a spec the engine refuses is not tried again until it changes
    assert images(world, PRODUCTION, PROD_HOSTS) == old_images

    # The apply row is written before the lane's record settles: the record's ending has its row.
    last = world.rows("select cause, result from applies where lane = ? order by id desc limit 1", PRODUCTION)
    assert [(a["cause"], a["result"]) for a in last] == [("unverified", "rolled-back")]
    assert await world.daemon.stop(timeout=30) == 0


async def test_a_removed_rank_is_repaired_and_what_drifted_is_named(world: World) -> None:
    await wait_for(lambda: world.health(EUGR)[0] == "healthy", 60, "eugr healthy")
    rank = f"lanes-{EUGR}-r2"
    status, _, err = await world.fleet.runtime("dgx7").execute(["docker", "rm", "-f", rank])  # by hand
    assert status == 0, err
    await world.daemon.stop(timeout=30)
    await world.daemon.start()  # a restart resyncs at once (the resync interval is minutes)

    def repaired() -> bool:
        return bool(world.lane_row(EUGR).get("drift")) and images(world, EUGR, ("dgx7",)) != []

    await wait_for(repaired, 60, "the rank to be put back")
    items = json.loads(str(world.lane_row(EUGR)["drift"]))["items"]
    assert items == [{"kind": "missing", "host": "dgx7", "container": rank, "detail": ""}]
    [last] = world.rows("select cause, drift from applies where lane = ? order by id desc limit 1", EUGR)
    assert last["cause"] == "drift" and json.loads(str(last["drift"])) == items
    log = world.daemon.log.read_text()
    assert f"{rank} missing on dgx7" in log
    assert await world.daemon.stop(timeout=30) == 0


async def test_an_unrenderable_lane_is_denied_and_every_other_lane_converges(world: World) -> None:
    bump = world.fleet.registry.add("aidendle94/sparkrun-sglang-dsv41-gb10:next").pinned
    onto_the_cache = [{"source": "/srv/other-cache", "target": "/root/.cache/huggingface"}]
    changes: dict[str, dict[str, Any]] = {PRODUCTION: {"image": bump}, EUGR: {"mounts": onto_the_cache}}
    head = world.commit("production: bump; eugr: a mount that cannot be rendered", changes)
    await wait_for(lambda: world.health(PRODUCTION) == ("healthy", head), 60, "production at the head")
    assert images(world, PRODUCTION, PROD_HOSTS) == [bump] * 4
    lane = world.lane_row(EUGR)
    error = str(lane["last_error"])
    assert lane["health"] == "denied"
    assert f"state/lanes/{EUGR}.yaml: mounts[0]" in error and "cannot be rendered" in error
    log = world.daemon.log.read_text()
    assert "cycle.crashed" not in log
    # A later commit that fixes the lane converges it too: nothing stayed stuck.
    fixed = world.commit("eugr: mount removed", {PRODUCTION: {"image": bump}})
    await wait_for(lambda: world.health(EUGR)[0] == "healthy", 60, "eugr healthy again")
    assert world.health(PRODUCTION) == ("healthy", head) or world.health(PRODUCTION)[1] == fixed
    assert await world.daemon.stop(timeout=30) == 0
