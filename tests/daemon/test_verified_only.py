"""Only verified history is acted on: with signing on, an unsigned head that changes a tracked lane's image,
mounts and secrets is refused by the daemon, and neither the proposal branch its upstream job opens nor
the trial it runs on spare hosts takes anything from it; both start from the last signed, decided commit."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pygit2
import pytest

from reconciler.daemon.config import load_config
from reconciler.daemon.notify import Notifier
from reconciler.daemon.service import Daemon
from reconciler.source.loadcommit import load_commit
from tests.support.example import PRODUCTION, fast_files, with_spare_hosts
from tests.support.gitrepo import StateRepo
from tests.support.lanesproc import write_config
from tests.support.net import free_port
from tests.support.signing import allowed_signers, sign_files
from tests.support.sparks import start_sparks, stop_sparks
from tests.support.storeview import StoreView, lane_health
from tests.support.waiting import wait_for
from tests.upstream.fixtures import local_upstreams
from tests.upstream.servers import FakeGitHub, FakeRegistry, LocalServer

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
SGLANG = "sgl-project/sglang"
SPARE = ("dgx8", "dgx9", "dgx10", "dgx11")
EVIL_IMAGE = "evil.example/steal@sha256:" + "e" * 64
_salt = itertools.count(231)


class View(StoreView):
    def __init__(self, db: Path) -> None:
        self.db = db


async def test_an_unsigned_head_reaches_neither_a_proposal_branch_nor_a_trial_host(tmp_path: Path) -> None:
    gh = FakeGitHub((SGLANG,))
    gh.add(SGLANG, "v0.5.21", "2026-09-10T08:00:00Z")
    registry = FakeRegistry({"lmsysorg/sglang": ["v0.5.21-cu130"]})
    servers = [LocalServer(gh), LocalServer(registry)]
    github, reg = servers
    alice, allowed = allowed_signers(tmp_path / "keys")
    track = {
        "source": "sglang-releases",
        "image": f"{reg.host}/lmsysorg/sglang:{{tag}}-cu130",
        "versions": ">=0.5.21",
        "trial_hosts": list(SPARE),
    }

    def files(**production: Any) -> dict[str, bytes]:
        out = fast_files(**{PRODUCTION: {"bench_profile": "quick", "track": track, **production}})
        out["state/upstreams.yaml"] = local_upstreams(github.url, reg.host, "/nonexistent/v.git", "/nonexistent/f")
        with_spare_hosts(out, SPARE)
        return out

    origin = StateRepo(tmp_path / "origin.git", bare=True)
    good = sign_files(origin.repo, alice, files(), "signed fleet with spare Sparks\n")
    desired = load_commit(origin.repo, good)
    env = await start_sparks(desired, tmp_path / "sim", base_address=f"127.{60 + next(_salt) % 20}.{next(_salt)}.")
    task: asyncio.Task[int] | None = None
    daemon: Daemon | None = None
    try:
        model = desired.desired.models[desired.desired.lanes[PRODUCTION].model]
        for host in SPARE:
            env.fleet.runtime(host).add_model_path(model.path, model.weight_bytes)
        extra = f'require_signed_commits = "ssh"\nallowed_signers = "{allowed}"'
        config_path = write_config(tmp_path, origin.path, env, http_port=free_port(), extra=extra)
        config_path.write_text(config_path.read_text().replace("[ssh]", "[upstream]\nenabled = true\n[ssh]", 1))
        daemon = Daemon(load_config(config_path), notifier=Notifier(None), install_signals=False)
        task = asyncio.create_task(daemon.run())
        db = tmp_path / "daemon.db"
        view = View(db)
        await wait_for(lambda: lane_health(db, PRODUCTION) == ("healthy", good), 60, "production at the signed commit")

        # Push access, no key: the head asks for another image, the host's / and the control node's tokens.
        hostile = {
            "image": EVIL_IMAGE,
            "mounts": [{"source": "/", "target": "/host"}],
            "secrets": [{"name": "hf-token", "env": "HF_TOKEN"}, {"name": "github-token", "env": "GH_TOKEN"}],
        }
        unsigned = origin.commit(files(**hostile), "faster engine")
        daemon.trigger.kick("webhook")
        await wait_for(lambda: view.outcome(unsigned) == "refused", 30, "the unsigned head refused")
        assert daemon.decider.trusted == good

        # A new release: the upstream job proposes it and tries it on the spare hosts.
        gh.add(SGLANG, "v0.5.22", "2026-10-19T08:00:00Z")
        registry.add("lmsysorg/sglang", "v0.5.22-cu130")
        candidate = f"{reg.host}/lmsysorg/sglang@{registry.digest('lmsysorg/sglang', 'v0.5.22-cu130')}"
        env.fleet.registry.add(candidate, env={"STANDIN_LOAD_S": "1"})
        before = {h: len(env.fleet.commands_seen(h)) for h in SPARE}
        daemon.trigger.kick("upstream")
        branch = f"refs/heads/lanes/proposals/{PRODUCTION}/0.5.22"
        await wait_for(lambda: branch in origin.repo.references, 60, "the proposal branch pushed")
        # The upstream job runs beside the loop (a task of its own): it is done when its task is.
        job = daemon.jobs.get("upstream")
        await wait_for(lambda: job is not None and job.done(), 120, "the upstream job done")

        first = origin.repo.revparse_single(branch).peel(pygit2.Commit)
        assert isinstance(first, pygit2.Commit)
        while "Upstream:" not in first.message and first.parents:
            first = first.parents[0]  # the trial's evidence commit sits on top of the proposal
        assert [str(p) for p in first.parent_ids] == [good], "the proposal must branch from the signed commit"
        blob = origin.repo[first.tree[f"state/lanes/{PRODUCTION}.yaml"].id]
        assert isinstance(blob, pygit2.Blob)
        lane_text = blob.data.decode()
        assert "/host" not in lane_text and "github-token" not in lane_text and candidate in lane_text
        ran = [argv for h in SPARE for argv in env.fleet.commands_seen(h)[before[h] :]]
        assert any("docker run" in " ".join(a) for a in ran), "the trial ran"
        text = "\n".join(" ".join(a) for a in ran)
        assert "/host" not in text and "GH_TOKEN" not in text and "evil.example" not in text
        for host in ("dgx1", "dgx2", "dgx3", "dgx4"):
            for argv in env.fleet.commands_seen(host):
                assert "/host" not in " ".join(argv) and "evil.example" not in " ".join(argv)
    finally:
        if daemon is not None and task is not None:
            daemon.request_stop()
            await asyncio.wait_for(task, 30)
        await stop_sparks(env)
        for server in servers:
            server.close()
