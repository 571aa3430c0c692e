"""The two event kinds the other daemon tests do not cause, each through the daemon: a first rollout that never
gets ready (nothing to roll back to: `lane.failed`), and a new upstream release proposed with a pull request
on the forge of `[forge]` (`proposal.opened`, naming the pull request)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from reconciler.daemon.config import load_config
from reconciler.daemon.notify import Notifier
from reconciler.daemon.service import Daemon
from reconciler.source.loadcommit import load_commit
from tests.support.example import (
    EUGR,
    EUGR_REPO,
    NEVER_READY_HEALTH,
    PRODUCTION,
    example_state,
    fast,
    fast_files,
    loaded,
)
from tests.support.gitrepo import StateRepo
from tests.support.lanesproc import write_config
from tests.support.net import free_port
from tests.support.receivers import Receivers
from tests.support.sparks import loopback, start_sparks, stop_sparks
from tests.support.storeview import lane_health
from tests.support.waiting import wait_for
from tests.support.world import world_over
from tests.upstream.fixtures import local_upstreams
from tests.upstream.servers import FakeForge, FakeGitHub, FakeRegistry, LocalServer

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]
_salt = itertools.count(977)
SGLANG = "sgl-project/sglang"
TOKEN = "forge-token-for-proposals"


async def test_a_first_rollout_that_never_gets_ready_is_told_as_failed(tmp_path: Path) -> None:
    receivers = Receivers("unused")
    try:
        async with world_over(
            loaded(fast(example_state())), tmp_path, tmp_path / "simwork", loopback(next(_salt))
        ) as w:
            start = w.commit("eugr not started yet", {EUGR: {"desired": "stopped"}})
            hook = f'[notifications.receivers.ops]\nurl = "json://{receivers.hostport}/hook/ops"\n'
            d = w.add_daemon("daemon", log_level="info", extra=hook)
            await d.start()
            await w.deployed(start, (PRODUCTION,))
            never = w.fleet.registry.add(f"{EUGR_REPO}:never", env={"STANDIN_NEVER_HEALTHY": "1"}).pinned
            first = w.commit(
                "eugr: its first start, on an engine that never gets ready",
                {EUGR: {"image": never, "health": NEVER_READY_HEALTH}},
            )

            def told() -> list[str]:
                return [g.text for g in receivers.got if f"{EUGR} rollout failed ({first[:12]})" in g.text]

            await wait_for(lambda: bool(told()), 120, "the failed first rollout told")
            (text,) = told()
            assert (
                "nothing healthy was there to roll back to" in text
                and "serves nothing now" in text
                and f"lanes retry {EUGR}" in text
            )
            assert not [g for g in receivers.got if "rolled back" in g.text]
            assert await d.stop() == 0
    finally:
        receivers.close()


async def test_a_new_release_is_proposed_with_a_pull_request_and_told(tmp_path: Path) -> None:
    gh = FakeGitHub((SGLANG,))
    gh.add(SGLANG, "v0.5.21", "2026-09-10T08:00:00Z")
    registry = FakeRegistry({"lmsysorg/sglang": ["v0.5.21-cu130"]})
    forge = FakeForge("github", "team/state", TOKEN)
    servers = [LocalServer(gh), LocalServer(registry), LocalServer(forge)]
    github, reg, forge_server = servers
    receivers = Receivers("unused")
    track = {"source": "sglang-releases", "image": f"{reg.host}/lmsysorg/sglang:{{tag}}-cu130", "versions": ">=0.5.21"}
    files = fast_files(**{PRODUCTION: {"track": track}})
    files["state/upstreams.yaml"] = local_upstreams(github.url, reg.host, "/nonexistent/v.git", "/nonexistent/f")
    origin = StateRepo(tmp_path / "origin.git", bare=True)
    head = origin.commit(files, "fleet tracking sglang releases")
    desired = load_commit(origin.repo, head)
    env = await start_sparks(desired, tmp_path / "sim", base_address=loopback(next(_salt)))
    task: asyncio.Task[int] | None = None
    daemon: Daemon | None = None
    try:
        creds = tmp_path / "credentials"
        creds.mkdir()
        (creds / "forge-token").write_text(TOKEN + "\n")
        config_path = write_config(tmp_path, origin.path, env, http_port=free_port())
        extra = (
            "[upstream]\nenabled = true\n"
            f'[forge]\nkind = "github"\napi_url = "{forge_server.url}"\nrepo = "team/state"\n'
            f'token_file = "{creds / "forge-token"}"\n'
            f'[notifications.receivers.ops]\nurl = "json://{receivers.hostport}/hook/ops"\n'
        )
        config_path.write_text(config_path.read_text() + extra)
        daemon = Daemon(load_config(config_path), notifier=Notifier(None), install_signals=False)
        task = asyncio.create_task(daemon.run())
        db = tmp_path / "daemon.db"
        await wait_for(lambda: lane_health(db, PRODUCTION) == ("healthy", head), 60, "production applied")

        gh.add(SGLANG, "v0.5.22", "2026-10-19T08:00:00Z")
        registry.add("lmsysorg/sglang", "v0.5.22-cu130")
        daemon.trigger.kick("upstream")
        await wait_for(lambda: bool(forge.pulls), 60, "the pull request opened")
        (pull,) = forge.pulls
        assert pull["head"]["ref"] == f"lanes/proposals/{PRODUCTION}/0.5.22" and pull["base"]["ref"] == "main"

        def told() -> list[str]:
            return [g.text for g in receivers.got if f"proposal for {PRODUCTION}: 0.5.22" in g.text]

        await wait_for(lambda: bool(told()), 30, "the proposal told")
        assert pull["html_url"] in told()[0]
    finally:
        if daemon is not None and task is not None:
            daemon.request_stop()
            await asyncio.wait_for(task, 30)
        await stop_sparks(env)
        for server in servers:
            server.close()
        receivers.close()
