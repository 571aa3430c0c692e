"""The daemon as a real process: SIGKILL at every journaled step, SIGTERM during a health wait."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reconciler.cli.demo import DemoEnv, stop_demo
from tests.daemon.harness import (
    PROD_HOSTS,
    PRODUCTION,
    StateRepo,
    fast_files,
    free_port,
    lane_health,
    sim_for_example,
    spawn_daemon,
    wait_for,
    write_config,
)
from tests.execute.conftest import FAST_HEALTH

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
_salt = itertools.count(101)


@dataclass
class World:
    tmp: Path
    env: DemoEnv
    repo: StateRepo
    config: Path
    proc: asyncio.subprocess.Process | None = None

    @property
    def db(self) -> Path:
        return self.tmp / "daemon.db"

    async def start_daemon(self) -> None:
        self.proc = await spawn_daemon(self.config, self.tmp / "daemon.log")

    async def kill(self, sig: int) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        code = await asyncio.wait_for(self.proc.wait(), 30)
        self.proc = None
        return code

    def journal_has(self, lane: str, kind: str) -> bool:
        if not self.db.exists():
            return False
        with contextlib.closing(sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=5)) as conn:
            try:
                rows = conn.execute(
                    "select 1 from journal where lane = ? and kind = ? and state = 'started'", (lane, kind)
                ).fetchall()
            except sqlite3.OperationalError:
                return False
        return bool(rows)

    def lane_containers(self, host: str) -> list[tuple[str, str, str, str]]:
        return sorted(
            (n, c.status, c.labels.get("lanes.commit", ""), c.image_ref)
            for n, c in self.env.fleet.runtime(host).containers.items()
        )


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    env = await sim_for_example(tmp_path, next(_salt))
    repo = StateRepo(tmp_path / "state-repo")
    head = repo.commit(fast_files(), "initial fleet")
    w = World(tmp_path, env, repo, write_config(tmp_path, repo.path, env, http_port=free_port()))
    await w.start_daemon()
    try:
        await wait_for(lambda: lane_health(w.db, PRODUCTION) == ("healthy", head), 60, "first convergence")
        yield w
    finally:
        if w.proc is not None:
            w.proc.kill()
            await w.proc.wait()
        await stop_demo(env)


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
    head = world.repo.commit(fast_files(**{PRODUCTION: {"image": new_image}}), f"production: bump ({step})")
    await wait_for(lambda: world.journal_has(PRODUCTION, step), 30, f"the daemon inside step {step}", 0.01)
    assert await world.kill(signal.SIGKILL) == -signal.SIGKILL
    for host in PROD_HOSTS:
        world.env.fleet.runtime(host).latency.clear()
    await world.start_daemon()
    await wait_for(lambda: lane_health(world.db, PRODUCTION) == ("healthy", head), 60, "convergence after restart")
    for i, host in enumerate(PROD_HOSTS):
        assert world.lane_containers(host) == [(f"lanes-{PRODUCTION}-r{i}", "running", head, new_image)], host
    with contextlib.closing(sqlite3.connect(world.db)) as conn:
        stale = conn.execute("select count(*) from journal where state = 'started'").fetchone()[0]
    assert stale == 0
    assert await world.kill(signal.SIGTERM) == 0


async def test_sigterm_during_a_health_wait_rolls_back_and_exits(world: World) -> None:
    old = {h: world.lane_containers(h) for h in PROD_HOSTS}
    slow = world.env.fleet.registry.add(
        "aidendle94/sparkrun-sglang-dsv41-gb10:slow", env={"STANDIN_LOAD_S": "60"}
    ).pinned
    # A gate that cannot time out before the signal, however slow the machine: the case is a shutdown.
    patient = {**FAST_HEALTH, "ready_timeout_s": 300}
    world.repo.commit(fast_files(**{PRODUCTION: {"image": slow, "health": patient}}), "production: a slow image")
    await wait_for(lambda: world.journal_has(PRODUCTION, "wait-ready"), 30, "the health wait", 0.01)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    assert await world.kill(signal.SIGTERM) == 0
    print(f"\nSIGTERM during the health wait: exited in {loop.time() - t0:.2f} s")
    assert loop.time() - t0 < 30
    for host in PROD_HOSTS:
        now = world.lane_containers(host)
        assert [(n, s, c, i) for n, s, c, i in now if s == "running"] == [
            (n, "running", c, i) for n, _, c, i in old[host]
        ], host
        assert all(i != slow for _, _, _, i in now)
    health, _ = lane_health(world.db, PRODUCTION)
    assert health == "progressing"
