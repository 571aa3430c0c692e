"""`lanes plan` and `lanes apply` as an operator and a CI job run them, against simulated Sparks.

What a drift check relies on: an unreachable fleet is never "nothing to do" (exit 4, with or without
--exit-code, and --json lists the blocked lanes and hosts); pending changes exit 3 with --exit-code;
the plan says which fields changed since the commit the containers run, which ranks restart and for
how long. And apply never changes a host unasked: without a terminal, or with --json, it needs --yes.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import socket
import sys
from pathlib import Path

import pytest

from tests.support.simfleet import HOSTS, QWEN, SMALL, sim_fleet
from tests.support.sparks import loopback

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def test_an_unreachable_fleet_is_blocked_never_nothing_to_do(tmp_path: Path) -> None:
    async with sim_fleet(tmp_path, loopback(61)) as fleet:
        # Every host file names a loopback address and port where nothing listens.
        args = fleet.connect()
        files = fleet.files(addresses=dict.fromkeys(HOSTS, "127.0.0.1"))
        files["state/fleet.yaml"] = files["state/fleet.yaml"].replace(
            f"ssh_port: {fleet.env.fleet.targets['spark1'].port}".encode(), f"ssh_port: {_closed_port()}".encode()
        )
        fleet.commit(files, "hosts nobody answers on")

        for extra in ([], ["--exit-code"]):
            code, out, err = await fleet.lanes("plan", *args, *extra)
            assert code == 4, (extra, out, err)
            assert "nothing to do" not in out
            assert "unreachable: spark1, spark2, spark3" in out
            assert f"blocked {QWEN}: host(s) unreachable" in " ".join(out.split())
        code, out, err = await fleet.lanes("plan", *args, "--json", "--exit-code")
        assert code == 4, err
        data = json.loads(out)
        assert data["changes"] is False and data["ok"] is False and data["exit_code"] == 4
        assert data["unreachable"] == ["spark1", "spark2", "spark3"]
        assert sorted(b["name"] for b in data["blocked"]) == [QWEN, SMALL]
        assert {b["cause"] for b in data["blocked"]} == {"unreachable"}
        # --lane narrows what counts: a lane on spark2 only blocks on spark2.
        code, out, _ = await fleet.lanes("plan", *args, "--json", "--lane", SMALL)
        data = json.loads(out)
        assert code == 4 and data["unreachable"] == ["spark2"] and [b["name"] for b in data["blocked"]] == [SMALL]


async def test_plan_exit_codes_apply_asks_and_the_plan_shows_the_field_diff(tmp_path: Path) -> None:
    async with sim_fleet(tmp_path, loopback(62)) as fleet:
        args = fleet.connect()
        code, out, err = await fleet.lanes("plan", *args)
        assert code == 0, err
        assert f"deploy  {QWEN}: not running: first deploy" in out
        code, out, err = await fleet.lanes("plan", *args, "--exit-code")
        assert code == 3, err
        # At 80 columns every line fits, wrapped at words under its own text; in a pipe each step is one line.
        code, narrow, _ = await fleet.lanes("plan", *args, columns=80)
        assert code == 0 and max(len(line) for line in narrow.splitlines()) <= 80
        assert "".join(narrow.split()) == "".join(out.split())  # the same text, only the line breaks differ
        assert len(narrow.splitlines()) > len(out.splitlines())
        code, out, _ = await fleet.lanes("plan", *args, "--lane", "nope", "--json")
        assert code == 2
        error = json.loads(out)
        assert error["ok"] is False and error["exit_code"] == 2
        assert "no lane nope" in error["error"] and QWEN in error["error"] and SMALL in error["error"]

        # apply without a terminal, or with --json, refuses without --yes: nothing is started.
        for extra in ([], ["--json"]):
            code, out, err = await fleet.lanes("apply", *args, *extra)
            assert code == 6, (extra, out, err)
        assert (
            json.loads(out)
            == {
                "ok": False,
                "error": json.loads(out)["error"],
                "exit_code": 6,
            }
            and "--yes" in json.loads(out)["error"]
        )
        assert "--yes" in err or "--yes" in out
        assert all(not fleet.env.fleet.runtime(h).containers for h in HOSTS)
        code, _, _ = await fleet.lanes("plan", *args, "--exit-code")
        assert code == 3

        code, out, err = await fleet.lanes("apply", *args, "--yes", "--json")
        assert code == 0, out + err
        assert json.loads(out)["ok"] is True
        # Progress on stderr (no terminal: no live footer): a step's start, then its end with its duration.
        steps = [line for line in err.splitlines() if f" {QWEN} " in line]
        ends = [line for line in steps if " ✓ " in line]
        assert ends and all(re.search(r"\(\d+\.\d s\)$", line) for line in ends), err
        assert [line for line in steps if " wait-ready: " in line and " … " in line]  # what a log needs
        assert len([line for line in ends if " wait-ready: " in line]) == 1
        code, out, err = await fleet.lanes("plan", *args, "--exit-code")
        assert code == 0, out + err
        assert "nothing to do" in out

        # A commit lowers max_num_seqs: the plan names the field, the rank that restarts and the downtime.
        code, out, err = await fleet.lanes("status", "--json", "--db", str(fleet.db), "--repo", str(fleet.repo))
        assert code == 0, err
        ready = next(r for r in json.loads(out)["lanes"] if r["name"] == QWEN)["timings"]["to_token"]
        fleet.commit(fleet.files(seqs=6), "qwen-a: 6 sequences")
        code, out, err = await fleet.lanes("plan", *args, "--exit-code")
        assert code == 3, out + err
        assert "max_num_seqs: 8 -> 6" in out
        assert f"restarts rank 0 on spark1; expected downtime about {ready:.0f} s" in " ".join(out.split())
        assert "runs spec" not in out  # the hashes gave way to the fields
        code, out, err = await fleet.lanes("plan", *args, "--json", "--lane", QWEN)
        assert code == 0, err
        data = json.loads(out)
        assert [lane["name"] for lane in data["lanes"]] == [QWEN]
        diff = data["lanes"][0]["diff"]
        assert diff["fields"] == [
            {"file": f"state/lanes/{QWEN}.yaml", "field": "max_num_seqs", "kind": "changed", "old": 8, "new": 6}
        ]
        assert diff["restarts"] == ["rank 0 on spark1"] and diff["expected_downtime_s"] == ready


async def _in_a_terminal(argv: list[str], answer: str) -> tuple[int, str]:
    """`lanes ARGV` on a real pseudo-terminal (util-linux `script`), typing `answer`; exit code and screen."""
    command = shlex.join([sys.executable, "-m", "reconciler.cli.main", *argv])
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = await asyncio.create_subprocess_exec(
        "script", "-qec", f"stty cols 120 rows 40; {command}", "/dev/null",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(proc.communicate(answer.encode()), 100)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode(errors="replace").replace("\r\n", "\n"))


@pytest.mark.skipif(shutil.which("script") is None, reason="needs util-linux script for a pseudo-terminal")
async def test_apply_on_a_terminal_shows_the_plan_and_asks(tmp_path: Path) -> None:
    async with sim_fleet(tmp_path, loopback(63)) as fleet:
        code, screen = await _in_a_terminal(["apply", *fleet.connect()], "n\n")
        assert code == 6, screen
        assert f"{QWEN}: not running: first deploy" in screen and "apply these changes?" in screen
        assert "not applied: nothing was changed" in screen
        assert all(not fleet.env.fleet.runtime(h).containers for h in HOSTS)
        code, screen = await _in_a_terminal(["apply", *fleet.connect()], "y\n")
        assert code == 0, screen
        assert fleet.env.fleet.runtime("spark1").containers and fleet.env.fleet.runtime("spark2").containers
