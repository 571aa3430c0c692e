"""Health is observed, not inferred: the daemon as a real process, killed during a readiness wait.

Before: a daemon killed (SIGKILL) while a lane waited for readiness came back, saw the new
containers running with the desired spec, called the lane in sync and marked it healthy without
asking the engine, which never became ready. Now an in-sync spec whose readiness was never observed
is gated again, and rolled back when it fails; and a removed rank's repair says what drifted.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import signal
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reconciler.cli.demo import DemoEnv, stop_demo
from tests.daemon.harness import (
    EUGR,
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

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
_salt = itertools.count(151)


@dataclass
class Daemon:
    tmp: Path
    env: DemoEnv
    repo: StateRepo
    config: Path
    proc: asyncio.subprocess.Process | None = None

    @property
    def db(self) -> Path:
        return self.tmp / "daemon.db"

    async def start(self) -> None:
        self.proc = await spawn_daemon(self.config, self.tmp / "daemon.log")

    async def kill(self, sig: int) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        code = await asyncio.wait_for(self.proc.wait(), 30)
        self.proc = None
        return code

    def query(self, sql: str, *args: object) -> list[tuple[object, ...]]:
        if not self.db.exists():
            return []
        with contextlib.closing(sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=5)) as conn:
            try:
                return list(conn.execute(sql, args).fetchall())
            except sqlite3.OperationalError:
                return []

    def in_step(self, lane: str, kind: str) -> bool:
        return bool(self.query("select 1 from journal where lane = ? and kind = ? and state = 'started'", lane, kind))

    def images(self, lane: str, hosts: tuple[str, ...]) -> list[str]:
        out = []
        for host in hosts:
            for name, c in self.env.fleet.runtime(host).containers.items():
                if name.startswith(f"lanes-{lane}-") and c.status == "running":
                    out.append(c.image_ref)
        return out


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[Daemon]:
    env = await sim_for_example(tmp_path, next(_salt))
    repo = StateRepo(tmp_path / "state-repo")
    head = repo.commit(fast_files(), "initial fleet")
    d = Daemon(tmp_path, env, repo, write_config(tmp_path, repo.path, env, http_port=free_port()))
    await d.start()
    try:
        await wait_for(lambda: lane_health(d.db, PRODUCTION) == ("healthy", head), 60, "first convergence")
        yield d
    finally:
        if d.proc is not None:
            d.proc.kill()
            await d.proc.wait()
        await stop_demo(env)


async def test_sigkill_during_the_wait_of_a_never_ready_engine_ends_rolled_back(daemon: Daemon) -> None:
    first = lane_health(daemon.db, PRODUCTION)[1]
    old_images = daemon.images(PRODUCTION, PROD_HOSTS)
    broken = daemon.env.fleet.registry.add(
        "aidendle94/sparkrun-sglang-dsv41-gb10:never", env={"STANDIN_NEVER_HEALTHY": "1"}
    ).pinned
    daemon.repo.commit(fast_files(**{PRODUCTION: {"image": broken}}), "production: an engine that never gets ready")
    await wait_for(lambda: daemon.in_step(PRODUCTION, "wait-ready"), 30, "the readiness wait", 0.01)
    assert await daemon.kill(signal.SIGKILL) == -signal.SIGKILL
    assert daemon.images(PRODUCTION, PROD_HOSTS) == [broken] * 4  # the never-ready ranks run, in sync
    await daemon.start()
    # Never 'healthy' for the broken spec: it is gated again, fails, and the old spec comes back.
    seen: set[str | None] = set()

    def settled() -> bool:
        health = lane_health(daemon.db, PRODUCTION)
        seen.add(health[0])
        return health == ("degraded", first)

    await wait_for(settled, 90, "the re-gate to fail and roll back", 0.05)
    assert "healthy" not in seen - {None} or lane_health(daemon.db, PRODUCTION) != ("healthy", None)
    [(error, failed)] = daemon.query(
        "select last_error, failed_fingerprint from lanes where name = ?", PRODUCTION
    )
    assert "readiness gate failed at stage 'health'" in str(error) and "rolled back to" in str(error)
    assert failed  # condemned: a spec the engine refuses is not tried again until it changes
    assert daemon.images(PRODUCTION, PROD_HOSTS) == old_images
    [(cause, result)] = daemon.query(
        "select cause, result from applies where lane = ? order by id desc limit 1", PRODUCTION
    )
    assert (cause, result) == ("unverified", "rolled-back")
    assert await daemon.kill(signal.SIGTERM) == 0


async def test_a_removed_rank_is_repaired_and_what_drifted_is_named(daemon: Daemon) -> None:
    await wait_for(lambda: lane_health(daemon.db, EUGR)[0] == "healthy", 60, "eugr healthy")
    rank = f"lanes-{EUGR}-r2"
    status, _, err = await daemon.env.fleet.runtime("dgx7").execute(["docker", "rm", "-f", rank])  # by hand
    assert status == 0, err
    await daemon.kill(signal.SIGTERM)
    await daemon.start()  # a restart resyncs at once (the resync interval is minutes)

    def repaired() -> bool:
        rows = daemon.query("select drift from lanes where name = ?", EUGR)
        return bool(rows and rows[0][0]) and daemon.images(EUGR, ("dgx7",)) != []

    await wait_for(repaired, 60, "the rank to be put back")
    [(drift,)] = daemon.query("select drift from lanes where name = ?", EUGR)
    items = json.loads(str(drift))["items"]
    assert items == [{"kind": "missing", "host": "dgx7", "container": rank, "detail": ""}]
    [(cause, applied_drift)] = daemon.query(
        "select cause, drift from applies where lane = ? order by id desc limit 1", EUGR
    )
    assert cause == "drift" and json.loads(str(applied_drift)) == items
    log = (daemon.tmp / "daemon.log").read_text()
    assert f"{rank} missing on dgx7" in log
    assert await daemon.kill(signal.SIGTERM) == 0


async def test_an_unrenderable_lane_is_denied_and_every_other_lane_converges(daemon: Daemon) -> None:
    bump = daemon.env.fleet.registry.add("aidendle94/sparkrun-sglang-dsv41-gb10:next").pinned
    onto_the_cache = [{"source": "/srv/other-cache", "target": "/root/.cache/huggingface"}]
    changes: dict[str, dict[str, Any]] = {PRODUCTION: {"image": bump}, EUGR: {"mounts": onto_the_cache}}
    head = daemon.repo.commit(
        fast_files(**changes),
        "production: bump; eugr: a mount that cannot be rendered",
    )
    await wait_for(lambda: lane_health(daemon.db, PRODUCTION) == ("healthy", head), 60, "production at the head")
    assert daemon.images(PRODUCTION, PROD_HOSTS) == [bump] * 4
    [(health, error)] = daemon.query("select health, last_error from lanes where name = ?", EUGR)
    assert health == "denied"
    assert f"state/lanes/{EUGR}.yaml: mounts[0]" in str(error) and "cannot be rendered" in str(error)
    log = (daemon.tmp / "daemon.log").read_text()
    assert "cycle.crashed" not in log
    # A later commit that fixes the lane converges it too: nothing stayed stuck.
    fixed = daemon.repo.commit(fast_files(**{PRODUCTION: {"image": bump}}), "eugr: mount removed")
    await wait_for(lambda: lane_health(daemon.db, EUGR)[0] == "healthy", 60, "eugr healthy again")
    assert lane_health(daemon.db, PRODUCTION) == ("healthy", head) or lane_health(daemon.db, PRODUCTION)[1] == fixed
    assert await daemon.kill(signal.SIGTERM) == 0
