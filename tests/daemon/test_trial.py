"""A proposal with trial_hosts: the candidate runs on spare simulated Sparks, is measured against production,
its evidence lands on the proposal branch and the comparison in the pull request; then the trial is removed."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pygit2
import pytest

from reconciler.daemon.config import load_config
from reconciler.daemon.evidencejob import benchmark_changed
from reconciler.daemon.trialjob import make_trial
from reconciler.execute.operations import Operations
from reconciler.source.loadcommit import LoadedCommit, load_commit
from reconciler.source.mirror import Mirror
from reconciler.spec.upstream import GitHubReleases
from reconciler.upstream import PollSettings, ProposalSettings, UpstreamStore, poll_source, propose_all
from reconciler.upstream.forge import ForgeSettings
from tests.support.example import EUGR, PRODUCTION, fast_files, with_spare_hosts
from tests.support.gitrepo import StateRepo
from tests.support.lanesproc import write_config
from tests.support.net import free_port
from tests.support.sparks import start_sparks, stop_sparks
from tests.upstream.fixtures import local_upstreams
from tests.upstream.servers import FakeForge, FakeGitHub, FakeRegistry, LocalServer


class Verified:
    """The decider's door as the trial sees it: `loaded` is the one verified and decided commit."""

    def __init__(self, loaded: LoadedCommit) -> None:
        self.loaded = loaded

    @property
    def trusted(self) -> str | None:
        return self.loaded.commit

    def act_on(self, sha: str) -> LoadedCommit:
        assert sha == self.loaded.commit
        return self.loaded


pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
SGLANG = "sgl-project/sglang"
TOKEN = "forge-token-for-trials"
SPARE = ("dgx8", "dgx9", "dgx10", "dgx11")
_salt = itertools.count(201)


async def test_a_candidate_is_tried_on_spare_hosts_and_compared_in_the_pull_request(tmp_path: Path) -> None:
    gh = FakeGitHub((SGLANG,))
    gh.add(SGLANG, "v0.5.21", "2026-09-10T08:00:00Z")
    registry = FakeRegistry({"lmsysorg/sglang": ["v0.5.21-cu130"]})
    forge = FakeForge("github", "team/state", TOKEN)
    servers = [LocalServer(gh), LocalServer(registry), LocalServer(forge)]
    github, reg, forge_server = servers
    try:
        track = {
            "source": "sglang-releases",
            "image": f"{reg.host}/lmsysorg/sglang:{{tag}}-cu130",
            "versions": ">=0.5.21",
            "trial_hosts": list(SPARE),
        }
        # eugr is measured too (it changes in the first cycle): the quick profile keeps that to seconds.
        lanes: dict[str, dict[str, Any]] = {
            PRODUCTION: {"bench_profile": "quick", "track": track},
            EUGR: {"bench_profile": "quick"},
        }
        files = fast_files(**lanes)
        files["state/upstreams.yaml"] = local_upstreams(github.url, reg.host, "/nonexistent/v.git", "/nonexistent/f")
        with_spare_hosts(files, SPARE)
        forge_repo = StateRepo(tmp_path / "forge.git", bare=True)
        forge_repo.commit(files, "fleet with spare Sparks")
        mirror = Mirror(str(forge_repo.path), tmp_path / "mirror")
        head = mirror.fetch()
        loaded = load_commit(mirror.repo, head)
        env = await start_sparks(loaded, tmp_path / "sim", base_address=f"127.{60 + next(_salt) % 20}.{next(_salt)}.")
        try:
            model = loaded.desired.models[loaded.desired.lanes[PRODUCTION].model]
            for host in SPARE:
                env.fleet.runtime(host).add_model_path(model.path, model.weight_bytes)
            config_path = write_config(tmp_path, forge_repo.path, env, http_port=free_port())
            config_path.write_text(config_path.read_text().replace("[ssh]", "[bench]\nenabled = true\n[ssh]", 1))
            config = load_config(config_path)
            # Production runs and has evidence on main: the baseline of the comparison.
            result = await env.runner.run_cycle(loaded)
            assert {r.lane: r.result for r in result.results}[PRODUCTION] == "applied"
            assert await benchmark_changed(config, loaded.desired, result, mirror, env.store)

            gh.add(SGLANG, "v0.5.22", "2026-10-19T08:00:00Z")
            registry.add("lmsysorg/sglang", "v0.5.22-cu130")
            candidate = f"{reg.host}/lmsysorg/sglang@{registry.digest('lmsysorg/sglang', 'v0.5.22-cu130')}"
            env.fleet.registry.add(candidate, env={"STANDIN_LOAD_S": "1", "STANDIN_TG_TPS": "60"})
            creds = tmp_path / "credentials"
            creds.mkdir()
            (creds / "forge-token").write_text(TOKEN)
            poll = PollSettings(data_dir=tmp_path / "upstream", credentials_dir=creds)
            with UpstreamStore(tmp_path / "up.db") as store:
                source = GitHubReleases(kind="github-releases", name="sglang-releases", repo=SGLANG, api_url=github.url)
                assert (await poll_source(source, store, poll)).status == "new"
                settings = ProposalSettings(
                    forge=ForgeSettings(
                        kind="github", api_url=forge_server.url, repo="team/state", token_credential="forge-token"
                    ),
                    poll=poll,
                )
                # The daemon decides its own evidence commit next: that is the verified commit proposals start from.
                decided = load_commit(mirror.repo, mirror.fetch())
                trial = make_trial(config, env.runner, mirror, Verified(decided), Operations())
                outcomes = await propose_all(mirror.repo, store, settings, trial=trial, base=decided.commit)
            opened = [o for o in outcomes if o.lane == PRODUCTION]
            assert opened and opened[0].action == "opened", outcomes
            body = forge.pulls[0]["body"]
            assert "### Trial on spare hosts" in body and "| pp_throughput" in body and "| tg_throughput" in body
            branch = f"refs/heads/lanes/proposals/{PRODUCTION}/0.5.22"
            tip = forge_repo.repo[forge_repo.repo.references[branch].target]
            assert isinstance(tip, pygit2.Commit)
            assert f"Lane: {PRODUCTION}-trial" in tip.message and "Evidence-For:" in tip.message
            for host in SPARE:  # the trial is gone again
                assert not [c for c in env.fleet.runtime(host).containers.values() if c.status == "running"]
            for host in ("dgx1", "dgx2", "dgx3", "dgx4"):
                running = [n for n, c in env.fleet.runtime(host).containers.items() if c.status == "running"]
                assert running == [f"lanes-{PRODUCTION}-r{int(host[-1]) - 1}"]
            assert LoadedCommit  # the type the trial hands to the reconciler
        finally:
            await stop_sparks(env)
    finally:
        for server in servers:
            server.close()
