"""Nothing long holds the daemon's loop: a commit is acted on while an upstream poll is still waiting for its
server (issue 23). The server is local (127.0.0.1) and answers only when the test lets it. And
`lanes reconcile --lane X` plans and acts for X alone."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from reconciler.daemon.config import load_config
from reconciler.daemon.control import _reconcile as control_reconcile
from reconciler.daemon.notify import Notifier
from reconciler.daemon.service import Daemon
from tests.support.example import EUGR, EUGR_HOSTS, PRODUCTION, fast_files
from tests.support.gitrepo import StateRepo
from tests.support.lanesproc import write_config
from tests.support.net import free_port
from tests.support.sparks import sim_for_example, stop_sparks
from tests.support.storeview import lane_health
from tests.support.waiting import wait_for
from tests.upstream.fixtures import local_upstreams
from tests.upstream.servers import FakeGitHub, LocalServer, Reply, Request

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


class SlowGitHub(FakeGitHub):
    """Holds every request until `release` is set (at most 60 s, longer than the poll's 30 s timeout)."""

    def __init__(self) -> None:
        super().__init__(("sgl-project/sglang", "vllm-project/vllm"))  # no releases: nothing to propose
        self.release = threading.Event()
        self.answered = 0

    def __call__(self, req: Request) -> Reply:
        self.release.wait(60)
        self.answered += 1
        return super().__call__(req)


def _files(api_url: str, **changes: dict[str, Any]) -> dict[str, bytes]:
    files = fast_files(**changes)
    # Every source on this machine: the slow server, a registry port nothing listens on, missing git repos.
    files["state/upstreams.yaml"] = local_upstreams(api_url, "127.0.0.1:9", "/nonexistent/v.git", "/nonexistent/f")
    return files


async def test_a_commit_is_acted_on_while_an_upstream_poll_waits(tmp_path: Path) -> None:
    github = SlowGitHub()
    server = LocalServer(github)
    env = await sim_for_example(tmp_path, 1)
    task: asyncio.Task[int] | None = None
    daemon: Daemon | None = None
    try:
        repo = StateRepo(tmp_path / "state-repo")
        first = repo.commit(_files(server.url), "initial fleet")
        config_path = write_config(tmp_path, repo.path, env, http_port=free_port())
        config_path.write_text(config_path.read_text() + "\n[upstream]\nenabled = true\ninterval_s = 3600\n")
        daemon = Daemon(load_config(config_path), notifier=Notifier(None), install_signals=False)
        task = asyncio.create_task(daemon.run())
        db = tmp_path / "daemon.db"
        await wait_for(lambda: lane_health(db, EUGR) == ("healthy", first), 60, "the first commit applied")
        daemon.trigger.kick("upstream")
        await wait_for(lambda: bool(server.requests), 20, "the upstream poll's first request")
        head = repo.commit(_files(server.url, **{EUGR: {"max_num_seqs": 4}}), "eugr: 4 sequences")
        # Without the background job the loop would sit in the poll until its 30 s timeout.
        await wait_for(lambda: lane_health(db, EUGR) == ("healthy", head), 20, "the commit applied during the poll")
        assert github.answered == 0, "the poll's request was answered before the commit was applied"
        assert daemon.status()["jobs"] == ["upstream"]
        github.release.set()
    finally:
        github.release.set()
        if daemon is not None and task is not None:
            daemon.request_stop()
            assert await asyncio.wait_for(task, 30) == 0
        await stop_sparks(env)
        server.close()


async def test_reconcile_of_one_lane_plans_and_acts_for_that_lane_only(tmp_path: Path) -> None:
    env = await sim_for_example(tmp_path, 2)
    task: asyncio.Task[int] | None = None
    daemon: Daemon | None = None
    try:
        repo = StateRepo(tmp_path / "state-repo")
        first = repo.commit(fast_files(), "initial fleet")
        config_path = write_config(tmp_path, repo.path, env, http_port=free_port())
        daemon = Daemon(load_config(config_path), notifier=Notifier(None), install_signals=False)
        task = asyncio.create_task(daemon.run())
        db = tmp_path / "daemon.db"
        await wait_for(lambda: lane_health(db, EUGR) == ("healthy", first), 60, "the first commit applied")
        await wait_for(lambda: lane_health(db, PRODUCTION) == ("healthy", first), 60, "production applied")
        await wait_for(lambda: daemon.phase.startswith("idle"), 30, "the daemon idle")
        planned: list[set[str]] = []
        probed_first: list[frozenset[str] | None] = []
        real = daemon.runner.observe_and_plan

        async def recording(*args: Any, **kwargs: Any) -> Any:
            out = await real(*args, **kwargs)
            planned.append({lp.lane for lp in out[2].lanes})
            probed_first.append(kwargs.get("first"))
            return out

        daemon.runner.observe_and_plan = recording  # type: ignore[method-assign]
        answer = await control_reconcile(daemon, {"lane": EUGR, "by": "test"})
        assert answer["lane"] == EUGR
        await wait_for(lambda: bool(planned), 30, "the lane's cycle")
        assert planned == [{EUGR}]  # the planner saw that lane alone
        assert probed_first == [frozenset(EUGR_HOSTS)]  # and the probe its hosts alone
        await wait_for(lambda: daemon.last_cycle.get("lanes") == [EUGR], 30, "the lane's cycle ending")
        # The commit's record still names every lane (the others from its last full cycle).
        last = daemon.decider.last_result
        assert last is not None and {r.lane for r in last.results} >= {EUGR, PRODUCTION}
        # A new head is decided in full, whatever asked: its reaction plans the lane it changes, and the full
        # cycle right after it every lane.
        planned.clear()
        repo.commit(fast_files(**{EUGR: {"max_num_seqs": 4}}), "eugr: 4 sequences")
        await wait_for(lambda: len(planned) >= 2, 30, "the new head's reaction and full cycle")
        assert planned[0] == {EUGR}
        assert {EUGR, PRODUCTION} <= planned[1]
    finally:
        if daemon is not None and task is not None:
            daemon.request_stop()
            assert await asyncio.wait_for(task, 30) == 0
        await stop_sparks(env)
