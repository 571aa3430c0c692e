"""SIGHUP: the daemon re-reads its settings; a broken file is refused and the running settings are kept."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest

from reconciler.cli.demo import stop_demo
from reconciler.facts.commands import LeaseRequest
from tests.daemon.harness import (
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


def events(log: Path) -> list[dict[str, object]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def logged(log: Path, event: str) -> list[dict[str, object]]:
    return [e for e in events(log) if e.get("event") == event]


async def test_sighup_reloads_good_settings_and_refuses_a_broken_file(tmp_path: Path) -> None:
    env = await sim_for_example(tmp_path, 189)
    repo = StateRepo(tmp_path / "state-repo")
    first = repo.commit(fast_files(), "initial fleet")
    config = write_config(tmp_path, repo.path, env, http_port=free_port())
    config.write_text(config.read_text().replace('log_level = "warning"', 'log_level = "info"'))
    good = config.read_text()
    log = tmp_path / "daemon.log"
    db = tmp_path / "daemon.db"
    proc: asyncio.subprocess.Process | None = None
    try:
        proc = await spawn_daemon(config, log)
        await wait_for(lambda: lane_health(db, PRODUCTION) == ("healthy", first), 60, "first convergence")

        config.write_text(good + "\n[daemon\nbroken = \n")
        proc.send_signal(signal.SIGHUP)
        await wait_for(lambda: bool(logged(log, "config.reload_failed")), 30, "the refusal of the broken file")
        failed = logged(log, "config.reload_failed")[0]
        assert str(config) in str(failed["path"]) and failed["error"]

        # Still running on the old settings: a new commit converges.
        second = repo.commit(fast_files(**{PRODUCTION: {"max_num_seqs": 4}}), "production: 4 seqs")
        await wait_for(lambda: lane_health(db, PRODUCTION) == ("healthy", second), 60, "the next commit")

        # A good file with a new owner: reloaded, and the next apply's leases carry the new owner.
        config.write_text(good.replace('owner = "lanes-test"', 'owner = "lanes-reloaded"'))
        proc.send_signal(signal.SIGHUP)
        await wait_for(lambda: bool(logged(log, "config.reloaded")), 30, "the reload")
        runtime = env.fleet.runtime("dgx1")
        seen_owners: set[str] = set()
        original = runtime.facts.lease

        def spy(request: LeaseRequest) -> tuple[int, str]:
            seen_owners.add(request.owner)
            return original(request)

        runtime.facts.lease = spy  # type: ignore[method-assign]  # watch what the daemon asks the host
        third = repo.commit(fast_files(**{PRODUCTION: {"max_num_seqs": 2}}), "production: 2 seqs")
        await wait_for(lambda: lane_health(db, PRODUCTION) == ("healthy", third), 60, "the commit after reload")
        assert seen_owners == {"lanes-reloaded"}
        assert proc.returncode is None

        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        proc = None
    finally:
        if proc is not None:
            proc.kill()
            await proc.wait()
        await stop_demo(env)
