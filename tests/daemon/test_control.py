"""The daemon's control API, through the real `lanes` CLI against a real daemon process on simulated Sparks.

An operator suspends a lane (a commit to it is then left alone, however hard a reconcile is forced),
sees who suspended it and why in `lanes status`, resumes it, forces a reconcile, waits for the lane
at the new commit, and reads a rank's engine output, all without the daemon's journal or an SSH key
of their own. A caller without the control token is refused and changes nothing.
"""

from __future__ import annotations

import getpass
import itertools
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.support.example import EUGR, EUGR_HOSTS
from tests.support.lanesproc import CONTROL_TOKEN, run_lanes
from tests.support.waiting import wait_for
from tests.support.world import World, daemon_world

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]
_salt = itertools.count(171)
REASON = "swapping the NIC on dgx6"


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with daemon_world(tmp_path, next(_salt)) as w:
        yield w


def operator_env(world: World, *, token: str | None = CONTROL_TOKEN) -> dict[str, str]:
    """What an operator's shell has: where the daemon is (LANES_DAEMON) and, when given, the control token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANES_")}
    env["LANES_DAEMON"] = f"http://127.0.0.1:{world.daemon.port}"
    if token is not None:
        env["LANES_DAEMON_TOKEN"] = token
    return env


def eugr_runs(world: World, commit: str) -> bool:
    """Every rank of the nightly lane runs, labelled with `commit`."""
    return all(
        world.labels(host).get(f"lanes-{EUGR}-r{rank}", {}).get("lanes.commit") == commit
        for rank, host in enumerate(EUGR_HOSTS)
    )


async def lanes_json(world: World, *args: str, code: int = 0) -> dict[str, object]:
    got, out, err = await run_lanes(*args, "--json", env=operator_env(world))
    assert got == code, (got, out, err)
    data: dict[str, object] = json.loads(out)
    assert data["ok"] is (code == 0) and data["exit_code"] == code, data
    return data


async def test_suspend_resume_reconcile_wait_and_logs_through_the_daemon(world: World) -> None:
    first = world.heads[0]
    env = operator_env(world)
    held = await lanes_json(world, "suspend", EUGR, "--reason", REASON)
    assert held["suspension"] == {"by": getpass.getuser(), "reason": REASON, "at": held["suspension"]["at"]}  # type: ignore[index]

    # `lanes status` finds the daemon by itself (no --db) and shows who holds the lane and why.
    status = await lanes_json(world, "status")
    row = {r["name"]: r for r in status["lanes"]}[EUGR]  # type: ignore[attr-defined]
    assert row["suspended"] is True and row["suspension"]["reason"] == REASON
    code, table, err = await run_lanes("status", env={**env, "COLUMNS": "400"})
    assert code == 0, err
    assert f"suspended by {getpass.getuser()}" in table and REASON in table

    # A commit to the held lane, and a reconcile forced by hand: the daemon reconciles it, and leaves the lane be.
    head = world.commit("eugr: an env change while it is held", {EUGR: {"env": {"LANES_TEST_MARK": "1"}}})
    kicked = await lanes_json(world, "reconcile", "--lane", EUGR)
    assert kicked["kicked"] is True
    await wait_for(lambda: world.commit_outcome(head) != {}, 60, "the daemon's verdict on the new head")
    assert eugr_runs(world, first), (world.snapshot(EUGR_HOSTS), world.commit_outcome(head))
    verdict = {e["lane"]: e["result"] for e in world.commit_outcome(head)["detail"]["lanes"]}
    assert verdict[EUGR] == "suspended", verdict
    # `wait` does not wait for what cannot happen: a suspended lane converges only once resumed (exit 4).
    waited = await lanes_json(world, "wait", EUGR, "--commit", head, "--timeout", "30", code=4)
    assert "suspended" in str(waited["why"])

    resumed = await lanes_json(world, "resume", EUGR)
    assert resumed["resumed"] is True
    # Resuming reconciles at once; `wait` returns when the lane is healthy at the commit (a prefix will do).
    done = await lanes_json(world, "wait", EUGR, "--commit", head[:12], "--timeout", "120")
    assert done["state"] == "healthy"
    assert eugr_runs(world, head)
    status = await lanes_json(world, "status")
    assert {r["name"]: r for r in status["lanes"]}[EUGR]["suspension"] is None  # type: ignore[attr-defined]

    # `lanes history` asks the daemon too: the hold and its lifting, with who and why, beside the commits.
    history = await lanes_json(world, "history", EUGR, "--repo", str(world.repo.path))
    holds = [(h["action"], h["by"], h["reason"]) for h in history["suspensions"]]  # type: ignore[attr-defined]
    assert holds[0] == ("suspend", getpass.getuser(), REASON) and holds[1][:2] == ("resume", getpass.getuser())
    code, text, err = await run_lanes("history", EUGR, "--repo", str(world.repo.path), env={**env, "COLUMNS": "300"})
    assert code == 0 and f"suspended by {getpass.getuser()}: {REASON}" in text, (text, err)

    # A rank's engine output, read by the daemon over its own SSH connection.
    code, out, err = await run_lanes("logs", EUGR, "--rank", "1", "--tail", "5", env=env)
    assert code == 0, err
    lines = out.splitlines()
    assert 1 <= len(lines) <= 5, out
    whole = (await world.docker(EUGR_HOSTS[1], "logs", f"lanes-{EUGR}-r1")).splitlines()
    start = whole.index(lines[0])
    assert whole[start : start + len(lines)] == lines
    code, out, err = await run_lanes("logs", EUGR, "--rank", "3", env=env)  # the lane has ranks 0 to 2
    assert code == 2 and "ranks 0 to 2" in err, (code, out, err)


async def test_a_caller_without_the_control_token_is_refused_and_changes_nothing(world: World) -> None:
    url = f"http://127.0.0.1:{world.daemon.port}/control/suspend"
    body = {"lane": EUGR, "reason": "not mine to hold", "by": "intruder"}
    async with httpx.AsyncClient(timeout=30) as client:
        for headers in (
            {},
            {"Authorization": "Bearer not-the-token"},
            {"Authorization": f"Basic {CONTROL_TOKEN}"},
            {"Authorization": f"Bearer {CONTROL_TOKEN}x"},
        ):
            response = await client.post(url, json=body, headers=headers)
            assert response.status_code == 401, (headers, response.text)
            assert response.headers["www-authenticate"].startswith("Bearer")
            assert response.json()["ok"] is False
    # The CLI with no token at all says why it was refused and how to give one.
    code, out, err = await run_lanes("suspend", EUGR, "--reason", "no token", env=operator_env(world, token=None))
    assert code == 1, (code, out, err)
    assert "bearer token" in err and "LANES_DAEMON_TOKEN" in err
    code, out, err = await run_lanes("reconcile", "--json", env=operator_env(world, token="wrong"))
    assert code == 1 and json.loads(out)["ok"] is False, out
    # Nothing was held.
    status = json.loads((await run_lanes("status", "--json", env=operator_env(world)))[1])
    assert all(r["suspension"] is None and not r["suspended"] for r in status["lanes"])
