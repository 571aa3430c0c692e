"""The daemon as a real process: SIGKILL at every journaled step, SIGTERM during a health wait."""

from __future__ import annotations

import itertools
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.example import FAST_HEALTH, PROD_HOSTS, PRODUCTION
from tests.support.waiting import wait_for
from tests.support.world import World, daemon_world

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
_salt = itertools.count(101)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    """The daemon as a process over the example fleet, converged at the first commit."""
    async with daemon_world(tmp_path, next(_salt), connect_timeout_s=None) as w:
        yield w


def runs(world: World, host: str) -> list[tuple[str, str, str, str]]:
    """(name, status, commit, image) of every container on the host."""
    return [(b.name, b.status, b.commit, b.image) for b in world.containers(host)]


LATENCY = {
    "lease": "lanes-lease",
    "pull": "docker pull",
    "env-files": "lanes-envfile",
    "stop": "docker stop",
    "start": "docker run",
}


@pytest.mark.parametrize("step", ["lease", "pull", "env-files", "stop", "start", "wait-ready"])
async def test_sigkill_at_each_journaled_step_then_restart_converges_without_orphans(world: World, step: str) -> None:
    load = "4" if step == "wait-ready" else "0.5"
    new_image = world.env.fleet.registry.add(
        "aidendle94/sparkrun-sglang-dsv41-gb10:bump", env={"STANDIN_LOAD_S": load}
    ).pinned
    if step in LATENCY:
        for host in PROD_HOSTS:
            world.env.fleet.runtime(host).latency[LATENCY[step]] = 1.5
    head = world.commit(f"production: bump ({step})", {PRODUCTION: {"image": new_image}})
    await wait_for(lambda: world.in_step(PRODUCTION, step), 30, f"the daemon inside step {step}", 0.01)
    assert await world.daemon.stop(signal.SIGKILL, timeout=30) == -signal.SIGKILL
    for host in PROD_HOSTS:
        world.env.fleet.runtime(host).latency.clear()
    await world.daemon.start()
    await wait_for(lambda: world.health(PRODUCTION) == ("healthy", head), 60, "convergence after restart")
    for i, host in enumerate(PROD_HOSTS):
        assert runs(world, host) == [(f"lanes-{PRODUCTION}-r{i}", "running", head, new_image)], host
    assert world.unfinished_steps() == []
    assert await world.daemon.stop(timeout=30) == 0


async def test_sigterm_during_a_health_wait_rolls_back_and_exits(world: World) -> None:
    old = {h: runs(world, h) for h in PROD_HOSTS}
    slow = world.env.fleet.registry.add(
        "aidendle94/sparkrun-sglang-dsv41-gb10:slow", env={"STANDIN_LOAD_S": "60"}
    ).pinned
    # A gate that cannot time out before the signal, however slow the machine: the case is a shutdown.
    patient = {**FAST_HEALTH, "ready_timeout_s": 300}
    world.commit("production: a slow image", {PRODUCTION: {"image": slow, "health": patient}})
    await wait_for(lambda: world.in_step(PRODUCTION, "wait-ready"), 30, "the health wait", 0.01)
    # It exits (0) although the engine would load for 60 s more and the gate wait 300 s: the stop does not
    # wait for readiness. The bound on the wait only keeps a hanging daemon from hanging the test.
    assert await world.daemon.stop(timeout=30) == 0
    for host in PROD_HOSTS:
        now = runs(world, host)
        assert [(n, s, c, i) for n, s, c, i in now if s == "running"] == [
            (n, "running", c, i) for n, _, c, i in old[host]
        ], host
        assert all(i != slow for _, _, _, i in now)
    health, _ = world.health(PRODUCTION)
    assert health == "progressing"
