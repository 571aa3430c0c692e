"""A lane change is an operation of its own: the daemon never waits for one lane's readiness gate.

Before, the daemon's loop awaited each whole cycle, and a cycle ended only when every lane it touched
had passed or failed its gate: a change to the production lane waited behind the nightly lane's
600 s gate, and a revert pushed during a never-ready spec's gate waited for that gate to run out.
Now each change runs as its own task; a newer commit that wants another spec of a lane in flight
ends its transaction at the next safe point (recorded as preempted) and applies the newest spec.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.example import EUGR, EUGR_HOSTS, EUGR_REPO, FAST_HEALTH, PROD_HOSTS, PRODUCTION
from tests.support.waiting import wait_for
from tests.support.world import World, daemon_world

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]
_salt = itertools.count(171)

LONG_GATE = {**FAST_HEALTH, "port_timeout_s": 600, "ready_timeout_s": 600}
"""A gate as long as a real engine load's (the production lane's own results: 508-604 s to healthy)."""


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with daemon_world(tmp_path, next(_salt), log_level="info") as w:
        yield w


def never_ready(world: World) -> dict[str, Any]:
    """EUGR's change to an engine that listens but never becomes ready, behind a 600 s gate."""
    image = world.fleet.registry.add(f"{EUGR_REPO}:never", env={"STANDIN_NEVER_HEALTHY": "1"}).pinned
    return {"image": image, "health": LONG_GATE}


def lane_events(world: World, lane: str) -> list[dict[str, Any]]:
    """The daemon's last events about `lane`: what ended an operation when a test did not expect it."""
    return [e for e in world.daemon.events() if e.get("lane") == lane][-20:]


def runs_at(world: World, lane: str, hosts: tuple[str, ...], commit: str) -> bool:
    boxes = [b for h in hosts for b in world.containers(h) if b.name.startswith(f"lanes-{lane}-")]
    return len(boxes) == len(hosts) and all(b.status == "running" and b.commit == commit for b in boxes)


async def test_a_change_to_one_lane_is_applied_while_another_lanes_long_gate_runs(world: World) -> None:
    bad = never_ready(world)
    gating = world.commit("eugr: a build that never gets ready", {EUGR: bad})
    await wait_for(lambda: world.in_step(EUGR, "wait-ready"), 60, "EUGR's readiness wait", 0.05)
    env = {**world.state.lanes[PRODUCTION].env, "LANES_TEST_HARMLESS": "1"}
    change = world.commit("production: a harmless env change", {EUGR: bad, PRODUCTION: {"env": env}})
    # Applied and gated while EUGR's 600 s gate still runs.
    await wait_for(
        lambda: world.health(PRODUCTION) == ("healthy", change) and runs_at(world, PRODUCTION, PROD_HOSTS, change),
        60,
        "the production change applied during EUGR's gate",
        0.1,
    )
    assert world.in_step(EUGR, "wait-ready"), (
        "EUGR's gate ended before production's change was applied",
        [(a["result"], a["error"]) for a in world.applies(EUGR, gating)],
        [{k: e.get(k) for k in ("event", "commit", "by", "detail", "error")} for e in lane_events(world, EUGR)],
    )
    assert runs_at(world, EUGR, EUGR_HOSTS, gating)  # EUGR's operation was left alone: its spec did not change
    _, status, table = await world.daemon_status(world.daemon)
    assert [op["lanes"] for op in status["daemon"]["operations"]] == [[EUGR]], status["daemon"]
    assert f"applying {EUGR} at {gating[:12]}" in table


async def test_a_revert_pushed_during_a_never_ready_gate_brings_the_good_spec_back(world: World) -> None:
    good_image = world.image_of(EUGR)
    first = world.heads[0]
    bad = world.commit("eugr: a build that never gets ready", {EUGR: never_ready(world)})
    await wait_for(lambda: world.in_step(EUGR, "wait-ready"), 60, "EUGR's readiness wait", 0.05)
    revert = world.commit("Revert eugr: a build that never gets ready")
    # One engine load (the stand-in's, well under a second) and a few seconds, not the rest of a 600 s gate.
    await wait_for(
        lambda: world.health(EUGR) == ("healthy", revert) and world.lane_runs(EUGR, EUGR_HOSTS, revert, good_image),
        60,
        "the good spec serving again after the revert",
        0.1,
    )
    ended = [(a["result"], a["error"]) for a in world.applies(EUGR, bad)]
    assert [r for r, _ in ended] == ["preempted"], ended
    assert f"preempted by commit {revert[:12]}" in str(ended[0][1])
    # The preempted transaction stopped what it started and restored nothing (no rollback step, no gate of it).
    steps = world.rows("select kind from journal where lane = ? and [commit] = ? order by id", EUGR, bad)
    assert "preempt" in [s["kind"] for s in steps] and "rollback" not in [s["kind"] for s in steps]
    assert world.outcome(bad) == "preempted"
    assert world.outcome(revert) == "applied"
    assert world.health(PRODUCTION) == ("healthy", first)  # the other lane was never touched
