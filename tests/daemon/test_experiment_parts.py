"""The parts of the experiments job on their own: which lanes a trial branch changes, the trial lane on the spare
hosts, the trial branches fetched (a deleted one gone), and the comparison posted on a person's pull request on
both forges."""

from __future__ import annotations

from pathlib import Path

import httpx
import pygit2
import pytest

from reconciler.daemon.experimentjob import changed_lanes, trial_lane
from reconciler.source.mirror import Mirror
from reconciler.spec.lane import Lane
from reconciler.upstream.forge import ForgeSettings, comment_on_pull, find_open_pull
from tests.support.example import EUGR, PRODUCTION, example_state
from tests.support.gitrepo import StateRepo
from tests.upstream.servers import FakeForge, LocalServer

pytestmark = pytest.mark.timeout(60)


def changed(lane: Lane, **update: object) -> Lane:
    return Lane.model_validate({**lane.model_dump(), **update})


def test_only_lanes_the_branch_adds_or_changes_and_runs_are_tried() -> None:
    lanes = example_state().lanes
    prod, eugr = lanes[PRODUCTION], lanes[EUGR]
    assert changed_lanes(lanes, lanes) == []
    branch = {
        **lanes,
        PRODUCTION: changed(prod, max_num_seqs=prod.max_num_seqs + 1),
        EUGR: changed(eugr, desired="stopped"),  # stopping is nothing to try
        "new-lane": changed(prod, name="new-lane"),
    }
    assert changed_lanes(branch, lanes) == sorted(["new-lane", PRODUCTION])
    assert changed_lanes({**lanes, PRODUCTION: changed(prod, suspended=True, max_num_seqs=3)}, lanes) == []


def test_the_trial_lane_takes_as_many_spare_hosts_as_the_lane_has() -> None:
    prod = example_state().lanes[PRODUCTION]  # four hosts
    trial = trial_lane(prod, ("s1", "s2", "s3", "s4", "s5"))
    assert (trial.name, trial.hosts, trial.track) == (f"{PRODUCTION}-trial", ("s1", "s2", "s3", "s4"), None)
    assert trial.served_name == prod.served_name and trial.image == prod.image
    with pytest.raises(ValueError, match="runs on 4 host"):
        trial_lane(prod, ("s1", "s2"))


def test_trial_branches_are_fetched_and_a_deleted_one_is_gone(tmp_path: Path) -> None:
    forge = StateRepo(tmp_path / "forge.git", bare=True)
    head = forge.commit({"README": b"x"}, "main")
    one = forge.commit({"README": b"one"}, "idea one", parents=[head], ref="refs/heads/lanes/trials/one")
    two = forge.commit({"README": b"two"}, "idea two", parents=[head], ref="refs/heads/lanes/trials/deep/two")
    forge.commit({"README": b"p"}, "proposal", parents=[head], ref="refs/heads/lanes/proposals/x/1.0")
    mirror = Mirror(str(forge.path), tmp_path / "mirror")
    mirror.fetch()
    assert mirror.fetch_branches("lanes/trials/") == {"lanes/trials/one": one, "lanes/trials/deep/two": two}
    forge.repo.references.delete("refs/heads/lanes/trials/one")
    assert mirror.fetch_branches("lanes/trials/") == {"lanes/trials/deep/two": two}
    assert isinstance(mirror.repo[two], pygit2.Commit)
    with pytest.raises(ValueError, match="folder of branches"):
        mirror.fetch_branches("lanes/trials")


@pytest.mark.parametrize("kind", ["github", "gitea"])
async def test_a_comparison_is_posted_on_the_pull_request_of_the_branch(kind: str) -> None:
    forge = FakeForge(kind, "team/state", "tok")
    server = LocalServer(forge)
    try:
        settings = ForgeSettings(kind=kind, api_url=server.url, repo="team/state")
        forge.open_by_hand("lanes/trials/other", "another idea")
        async with httpx.AsyncClient(timeout=10) as client:
            assert await find_open_pull(client, settings, "tok", "lanes/trials/one") is None
            pull = forge.open_by_hand("lanes/trials/one", "an idea")
            found = await find_open_pull(client, settings, "tok", "lanes/trials/one")
            assert found == (pull["number"], pull["html_url"])
            url = await comment_on_pull(client, settings, "tok", pull["number"], "### the table")
        assert pull["comments"] == ["### the table"] and url.startswith(pull["html_url"])
        assert forge.pulls[0]["comments"] == []
    finally:
        server.close()
