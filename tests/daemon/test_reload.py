"""SIGHUP: the daemon re-reads its settings; a broken file is refused and the running settings are kept."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from reconciler.facts.commands import LeaseRequest
from tests.support.example import PRODUCTION, fast_files
from tests.support.gitrepo import StateRepo
from tests.support.lanesproc import Child, end_process, log_events, spawn_daemon, write_config
from tests.support.net import free_port
from tests.support.sparks import sim_for_example, stop_sparks
from tests.support.storeview import lane_health
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


async def test_sighup_reloads_good_settings_and_refuses_a_broken_file(tmp_path: Path) -> None:
    env = await sim_for_example(tmp_path, 189)
    repo = StateRepo(tmp_path / "state-repo")
    first = repo.commit(fast_files(), "initial fleet")
    config = write_config(tmp_path, repo.path, env, http_port=free_port(), log_level="info")
    good = config.read_text()
    log = tmp_path / "daemon.log"
    db = tmp_path / "daemon.db"
    proc: Child | None = None
    try:
        proc = await spawn_daemon(config, log)
        await wait_for(lambda: lane_health(db, PRODUCTION) == ("healthy", first), 60, "first convergence")

        config.write_text(good + "\n[daemon\nbroken = \n")
        proc.send_signal(signal.SIGHUP)
        await wait_for(lambda: bool(log_events(log, "config.reload_failed")), 30, "the refusal of the broken file")
        failed = log_events(log, "config.reload_failed")[0]
        assert str(config) in str(failed["path"]) and failed["error"]

        # Still running on the old settings: a new commit converges.
        second = repo.commit(fast_files(**{PRODUCTION: {"max_num_seqs": 4}}), "production: 4 seqs")
        await wait_for(lambda: lane_health(db, PRODUCTION) == ("healthy", second), 60, "the next commit")

        # A good file with a new owner: reloaded, and the next apply's leases carry the new owner.
        config.write_text(good.replace('owner = "lanes-test"', 'owner = "lanes-reloaded"'))
        proc.send_signal(signal.SIGHUP)
        await wait_for(lambda: bool(log_events(log, "config.reloaded")), 30, "the reload")
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
        await end_process(proc)
        await stop_sparks(env)
