"""The README's main command: `lanes demo` runs the daemon on simulated Sparks; a commit changes what runs.

Followed as a person would: read the instructions it prints, commit the change it suggests to the clone
it watches, ask `lanes status --daemon` until the lane runs the new commit, read the git note, stop it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.example import EUGR, PRODUCTION, ROOT
from tests.support.lanesproc import run_lanes

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "Ada",
            "GIT_AUTHOR_EMAIL": "ada@example.org",
            "GIT_COMMITTER_NAME": "Ada",
            "GIT_COMMITTER_EMAIL": "ada@example.org",
        },
    )
    return out.stdout


async def _status(url: str) -> tuple[int, dict[str, Any]]:
    code, out, _ = await run_lanes("status", "--daemon", url, "--json")
    return code, json.loads(out)


async def _until(url: str, ok: Any, what: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        code, last = await _status(url)
        if code == 0 and ok(last):
            return last
        await asyncio.sleep(0.5)
    raise AssertionError(f"{what} not seen within {timeout:.0f} s; last status: {json.dumps(last)[:3000]}")


def _lanes(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in status["lanes"]}


async def test_the_demo_daemon_applies_a_commit_to_its_clone_and_says_so(tmp_path: Path) -> None:
    err_path = tmp_path / "demo.stderr"
    with err_path.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "reconciler.cli.main",
            "demo",
            "--repo",
            str(ROOT),
            "--resync-s",
            "30",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=err,
            stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "COLUMNS": "300"},
        )
    try:
        deadline = time.monotonic() + 120
        printed = ""
        while "lanes status --daemon" not in printed:
            assert proc.returncode is None, printed[-3000:]
            assert time.monotonic() < deadline, printed[-3000:]
            await asyncio.sleep(0.2)
            printed = err_path.read_text(errors="replace")
        url_match = re.search(r"lanes status --daemon (http://127\.0\.0\.1:\d+)", printed)
        clone_match = re.search(r"The daemon now watches (\S+) ", printed)
        assert url_match and clone_match, printed[-3000:]
        url, clone = url_match.group(1), Path(clone_match.group(1))

        first = await _until(
            url,
            lambda s: s["daemon"]["phase"].startswith("idle") and s["daemon"]["head"],
            "the daemon's first cycle",
            60,
        )
        head = first["daemon"]["head"]
        assert _lanes(first)[EUGR]["health"] == "healthy" and _lanes(first)[PRODUCTION]["health"] == "healthy"
        # The real SMG in front of the simulated Sparks: the printed request reaches the nightly lane's engine.
        gateway = re.search(r"curl (http://127\.0\.0\.1:\d+)/v1/chat/completions", printed)
        if importlib.util.find_spec("smg") is not None:
            assert gateway, printed[-3000:]
            body = {"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
            deadline = time.monotonic() + 30  # routed once the daemon's first pass saw the lane healthy
            async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
                while (
                    answer := await client.post(gateway.group(1) + "/v1/chat/completions", json=body)
                ).status_code != 200:
                    assert time.monotonic() < deadline, (answer.status_code, answer.text)
                    await asyncio.sleep(0.5)

        # The change the demo suggests, committed as it says.
        lane_file = clone / "state" / "lanes" / f"{EUGR}.yaml"
        text = lane_file.read_text()
        assert "max_num_seqs: 8" in text
        lane_file.write_text(text.replace("max_num_seqs: 8", "max_num_seqs: 4"))
        _git(clone, "commit", "-qam", "eugr: 4 sequences")
        new_head = _git(clone, "rev-parse", "HEAD").strip()
        assert new_head != head

        after = await _until(
            url,
            lambda s: _lanes(s)[EUGR]["commit"] == new_head and _lanes(s)[EUGR]["health"] == "healthy",
            "eugr on the new commit",
            90,
        )
        assert after["daemon"]["head"] == new_head
        assert _lanes(after)[PRODUCTION]["health"] == "healthy"
        note = _git(clone, "log", "--notes=lanes", "-1")
        assert EUGR in note and "applied" in note, note

        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 60) == 0, err_path.read_text(errors="replace")[-3000:]
        code, gone = await _status(url)
        assert code == 1 and gone["daemon"]["reachable"] is False
    finally:
        if proc.returncode is None:  # a failed test: let the demo clean up its fleet and folder, then insist
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        workdir = re.search(r"(/\S+/lanes-demo-[^/\s]+)/", err_path.read_text(errors="replace"))
        if workdir:
            shutil.rmtree(workdir.group(1), ignore_errors=True)
