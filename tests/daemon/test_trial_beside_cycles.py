"""A trial on spare hosts never holds the daemon (issue 23): through the daemon over simulated Sparks.

A trial loads a model on spare hosts (tens of minutes on a Spark). It once ran holding a lock every cycle
takes, so a revert or an urgent change waited behind its whole readiness gate. Now a commit that does not
need the trial's hosts is applied while the trial's gate runs, and the trial is left alone; a commit whose
lane needs a host the trial holds ends the trial (its own cleanup stops its ranks) and is applied then.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reconciler.daemon.config import load_config
from reconciler.daemon.notify import Notifier
from reconciler.daemon.service import Daemon
from reconciler.spec.load import load_desired
from tests.support.example import (
    EUGR,
    FAST_HEALTH,
    PROD_REPO,
    PRODUCTION,
    SPARE_HOSTS,
    fast,
    fast_files,
    loaded,
    with_spare_hosts,
)
from tests.support.lanesproc import write_config
from tests.support.net import free_port
from tests.support.sparks import loopback
from tests.support.storeview import StoreView
from tests.support.waiting import wait_for
from tests.support.world import World, world_over

pytestmark = [pytest.mark.timeout(150), pytest.mark.slow]
_salt = itertools.count(211)
BRANCH = "lanes/trials/slow-build"
TRIAL = f"{PRODUCTION}-trial"
LONG_GATE = {**FAST_HEALTH, "port_timeout_s": 600, "ready_timeout_s": 600}
"""The trial's gate: as long as a real engine load's (the production lane's own results: 508-604 s)."""
APPLIED_S = 20.0
"""A commit beside a trial is applied in seconds (the stand-ins load in well under one); the trial's gate is 600 s."""


@dataclass
class Journal(StoreView):
    db: Path


@dataclass
class Rig:
    w: World
    daemon: Daemon
    journal: Journal

    def commit_main(self, message: str, **changes: dict[str, Any]) -> str:
        return self.w.repo.commit(with_spare_hosts(fast_files(**changes)), message)

    def running(self, host: str) -> list[str]:
        return sorted(n for n, c in self.w.fleet.runtime(host).containers.items() if c.status == "running")

    def trial_runs(self) -> bool:
        return all(self.running(h) == [f"lanes-{TRIAL}-r{i}"] for i, h in enumerate(SPARE_HOSTS))


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    """The example fleet and four spare Sparks, an in-process daemon converged at main, and a trial branch
    whose production build never gets ready behind a 600 s gate, tried on the spare hosts and in its gate."""
    state = fast(load_desired(with_spare_hosts(fast_files()), "c0ffee0000000000000000000000000000000001"))
    async with world_over(loaded(state), tmp_path, tmp_path / "simwork", loopback(next(_salt))) as w:
        for lane in (PRODUCTION, EUGR):  # either may run on the spare hosts
            model = state.models[state.lanes[lane].model]
            for host in SPARE_HOSTS:
                w.fleet.runtime(host).add_model_path(model.path, model.weight_bytes)
        start = w.repo.commit(with_spare_hosts(fast_files()), "fleet with spares")
        extra = f"[experiments]\nenabled = true\nhosts = {list(SPARE_HOSTS)!r}\ninterval_s = 3600\n".replace("'", '"')
        config = write_config(tmp_path, w.repo.path, w.env, http_port=free_port(), extra=extra, log_level="info")
        daemon = Daemon(load_config(config), notifier=Notifier(None), install_signals=False)
        task = asyncio.create_task(daemon.run())
        rig = Rig(w, daemon, Journal(tmp_path / "daemon.db"))
        try:
            await rig.journal.deployed(start)
            never = w.fleet.registry.add(f"{PROD_REPO}:never", env={"STANDIN_NEVER_HEALTHY": "1"}).pinned
            files = with_spare_hosts(fast_files(**{PRODUCTION: {"image": never, "health": LONG_GATE}}))
            w.repo.commit(files, "try a build that never gets ready", parents=[start], ref=f"refs/heads/{BRANCH}")
            daemon.trigger.kick("experiments")  # its interval is an hour: the test asks now
            await wait_for(lambda: rig.journal.in_step(TRIAL, "wait-ready"), 60, "the trial's readiness wait", 0.05)
            assert rig.trial_runs()
            yield rig
        finally:
            daemon.request_stop()
            assert await asyncio.wait_for(task, 60) == 0
        for host in SPARE_HOSTS:  # however the trial ended, its ranks are gone
            assert not [n for n in rig.running(host) if n.startswith(f"lanes-{TRIAL}-")], (host, rig.running(host))


async def test_a_commit_is_applied_while_a_trial_loads_on_spare_hosts(rig: Rig) -> None:
    env = {**rig.w.state.lanes[EUGR].env, "LANES_TEST_HARMLESS": "1"}
    change = rig.commit_main("eugr: a harmless env change", **{EUGR: {"env": env}})
    took = await wait_for(
        lambda: rig.journal.health(EUGR) == ("healthy", change), APPLIED_S, "the change applied during the trial", 0.1
    )
    # The trial was left alone: the commit needs none of its hosts, and its gate still runs.
    assert rig.journal.in_step(TRIAL, "wait-ready") and rig.trial_runs(), (took, rig.journal.lane_row(TRIAL))
    assert rig.daemon.status()["jobs"] == ["experiments"]
    (running,) = rig.daemon.status()["trials_running"]  # the trial and the spare hosts it holds, in /status
    assert running["lanes"] == [TRIAL] and running["ended"] is None and running["hosts"]


async def test_a_commit_that_needs_a_trials_host_ends_the_trial_and_is_applied(rig: Rig) -> None:
    moved = ("dgx8", "dgx9", "dgx10")
    change = rig.commit_main("eugr: onto three of the spare hosts", **{EUGR: {"hosts": list(moved)}})

    def eugr_on_spares() -> bool:
        return rig.journal.health(EUGR) == ("healthy", change) and all(
            rig.running(h) == [f"lanes-{EUGR}-r{i}"] for i, h in enumerate(moved)
        )

    await wait_for(eugr_on_spares, APPLIED_S, "EUGR applied on the trial's hosts", 0.1)
    assert rig.running("dgx11") == [], "the trial's last rank outlived it"
    await wait_for(lambda: not rig.daemon.status()["jobs"], 10, "the experiments job's end")
    (tried,) = rig.daemon.status()["trials"]
    assert (tried["branch"], tried["state"]) == (BRANCH, "failed"), tried
    report = rig.journal.rows("select report from experiments")[0]["report"]
    assert f"ended: commit {change[:12]} needs host dgx8 (lane {EUGR})" in report, report
