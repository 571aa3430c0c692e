"""A person's idea as a branch under lanes/trials/, through the real daemon process on simulated Sparks: the
changed lane runs as `<lane>-trial` on the spare hosts, is measured against production's evidence, the evidence
lands on that branch, the comparison is posted on the branch's pull request and a receiver is told; the trial is
removed again and production is never touched. A head the trial did not change is not tried twice."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pygit2
import pytest

from reconciler.source.loadcommit import load_commit
from reconciler.spec.load import load_desired
from tests.support.evidencerepo import evidence_files, lane_evidence
from tests.support.example import (
    EUGR,
    PROD_REPO,
    PRODUCTION,
    SPARE_HOSTS,
    fast,
    fast_files,
    loaded,
    with_spare_hosts,
)
from tests.support.receivers import Receivers
from tests.support.sparks import loopback
from tests.support.waiting import wait_for
from tests.support.world import World, world_over
from tests.upstream.servers import FakeForge, LocalServer

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
_salt = itertools.count(961)
QUICK = {"bench_profile": "quick"}
SPARE = SPARE_HOSTS
TOKEN = "forge-token-for-trial-branches"
BRANCH = "lanes/trials/faster-build"


def running(w: World, host: str) -> list[str]:
    return sorted(n for n, c in w.fleet.runtime(host).containers.items() if c.status == "running")


async def test_a_trial_branch_is_measured_on_spare_hosts_and_reported_on_its_pull_request(tmp_path: Path) -> None:
    forge = FakeForge("github", "team/state", TOKEN)
    server = LocalServer(forge)
    receivers = Receivers("unused")
    token = tmp_path / "forge-token"
    token.write_text(TOKEN + "\n")
    try:
        state = fast(load_desired(with_spare_hosts(fast_files()), "c0ffee0000000000000000000000000000000001"))
        async with world_over(loaded(state), tmp_path, tmp_path / "simwork", loopback(next(_salt))) as w:
            model = state.models[state.lanes[PRODUCTION].model]
            for host in SPARE:
                w.fleet.runtime(host).add_model_path(model.path, model.weight_bytes)
            start = w.repo.commit(with_spare_hosts(fast_files(**{PRODUCTION: QUICK, EUGR: QUICK})), "fleet with spares")
            extra = (
                f'[forge]\nkind = "github"\napi_url = "{server.url}"\nrepo = "team/state"\ntoken_file = "{token}"\n'
                f"[experiments]\nenabled = true\nhosts = {list(SPARE)!r}\ninterval_s = 10\n"
                "[bench]\nenabled = true\n"
                f'[notifications.receivers.ops]\nurl = "json://{receivers.hostport}/hook/ops"\n'
                'events = ["trial.reported"]\n'
            ).replace("'", '"')
            d = w.add_daemon("daemon", log_level="info", extra=extra)
            await d.start()
            await w.deployed(start)
            await wait_for(lambda: bool(lane_evidence(w, PRODUCTION)), 120, "production's first evidence")
            main_before = w.repo.head()
            production_before = {h: running(w, h) for h in ("dgx1", "dgx2", "dgx3", "dgx4")}

            # The idea: production on a build that generates faster, pushed as a trial branch, with a pull request.
            faster = w.fleet.registry.add(f"{PROD_REPO}:faster", env={"STANDIN_TG_TPS": "90", "STANDIN_LOAD_S": "0.5"})
            files = {
                **with_spare_hosts(fast_files(**{PRODUCTION: {**QUICK, "image": faster.pinned}, EUGR: QUICK})),
                **evidence_files(w),
            }
            idea = w.repo.commit(files, "try the faster build", parents=[main_before], ref=f"refs/heads/{BRANCH}")
            forge.open_by_hand(BRANCH, "Try the faster build")

            def comments() -> list[Any]:
                return list(forge.pulls[0].get("comments") or [])

            await wait_for(lambda: bool(comments()), 150, "the comparison posted on the pull request")
            (posted,) = comments()
            assert f"## Trial of `{BRANCH}` at {idea[:12]}" in posted, posted
            assert f"### {PRODUCTION} on {', '.join(SPARE)}" in posted
            assert "| tg_throughput" in posted and "better" in posted, posted

            tip = w.repo.repo.revparse_single(f"refs/heads/{BRANCH}")
            assert isinstance(tip, pygit2.Commit)
            assert [str(p) for p in tip.parent_ids] == [idea]  # the evidence, on top of the person's commit
            assert f"Lane: {PRODUCTION}-trial" in tip.message and f"Evidence-For: {idea}" in tip.message

            await wait_for(lambda: bool(receivers.got), 30, "the trial told")
            told = receivers.got[0].text
            assert BRANCH in told and "measured 1 of 1 lane(s)" in told and forge.pulls[0]["html_url"] in told

            (trial,) = (await d.status())["trials"]  # /status says what was tried and where to read it
            assert (trial["branch"], trial["commit_sha"], trial["state"]) == (BRANCH, idea, "measured")
            assert trial["evidence_commit"] == str(tip.id) and trial["pull"] == forge.pulls[0]["html_url"]

            # The trial is gone; production still runs what main says; main did not move for the trial.
            for host in SPARE:
                assert running(w, host) == []
            assert {h: running(w, h) for h in production_before} == production_before
            assert w.image_of(PRODUCTION) != faster.pinned
            main = load_commit(w.repo.repo, w.repo.head()).desired  # evidence of other lanes may land on main
            assert main.lanes[PRODUCTION].image != faster.pinned and f"{PRODUCTION}-trial" not in main.lanes

            # The daemon's own evidence commit on the branch is not a new idea: nothing more is tried or posted.
            seen = len(d.events("trial.branch"))
            await wait_for(lambda: len(d.events("trial.posted")) >= 1, 30, "the post logged")
            d.kick()
            await wait_for(lambda: any(e.get("event") == "cycle.done" for e in d.events()), 30, "a cycle")
            await _quiet(d, seconds=12)
            assert len(d.events("trial.branch")) == seen and len(comments()) == 1
            assert await d.stop() == 0
    finally:
        receivers.close()
        server.close()


async def _quiet(d: Any, seconds: float) -> None:
    """Let the experiments job run at least once more (its interval is 10 s)."""
    import asyncio

    await asyncio.sleep(seconds)
