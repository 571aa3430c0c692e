"""Rollouts through the real SMG binary on loopback, in front of the rig's hosts' stand-in engines (issue 26).

A real `lanes daemon` drives the rig over ssh and podman, with `[gateway] enabled`; SMG (smg 1.13.0, started
through lanes' launcher) routes `rig-chat` to the lane's head. A client sends one chat completion after another
to the gateway during each change (bounded in count; loopback and the rig's namespaces only):

1. in place (a new image on the same host): only 200 or 503 with Retry-After, never 404 or a refused connection;
2. blue/green (the lane moved to a free host): every request 200, and the old rank stops after the watch;
3. a new spec slow to its first token in the watch window (0.2-0.4 s, over the 0.1 s allowed; slower still and SMG
   itself vetoes the worker as stalled): aborted back to the old rank, every request 200, and
   the commit's note says why.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pygit2
import pytest

from reconciler.source.notes import read_note
from tests.rig.lanescli import LANES
from tests.rig.machine import LANES_ENV
from tests.rig.rig import Rig
from tests.support.rollouts import Stream, streaming, until_served, until_settled
from tests.support.smggateway import Gateway
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.rig,
    pytest.mark.timeout(300),
    pytest.mark.skipif(importlib.util.find_spec("smg") is None, reason="smg is not installed (scripts/setup does)"),
]
LANE = "chat"
MODEL = "rig-chat"


def _fleet_gateway(rig: Rig, gateway: Gateway, lanes: dict[str, Any] | None = None) -> None:
    """The rig's fleet file with a gateway section routing MODEL to LANE (committed by the next publish)."""
    path = rig.repo.work / "state" / "fleet.yaml"
    fleet = json.loads(path.read_text())
    fleet["gateway"] = {
        "host": "127.0.0.1",
        "port": gateway.port,
        "metrics_port": gateway.metrics_port,
        "models": {MODEL: [LANE]},
        "analysis": {"watch_s": 4, "drain_s": 10},
        "lanes": lanes or {},
    }
    path.write_text(json.dumps(fleet))


def _daemon_config(rig: Rig, gateway: Gateway) -> Path:
    folder = rig.folder / "daemon"
    folder.mkdir(exist_ok=True)
    (folder / "secrets").mkdir(exist_ok=True)
    text = f'''[repo]
url = "{rig.repo.forge}"
branch = "main"
mirror_dir = "{folder / "mirror"}"
fetch_interval_s = 1
resync_interval_s = 300
[ssh]
key = "{rig.client_key}"
known_hosts = "{rig.known_hosts}"
[daemon]
owner = "lanes-rig-daemon"
db = "{folder / "daemon.db"}"
secrets_dir = "{folder / "secrets"}"
log_level = "info"
[gateway]
enabled = true
url = "{gateway.url}"
key_file = "{gateway.key_file}"
interval_s = 2
'''
    path = folder / "reconciler.toml"
    path.write_text(text)
    return path


def _start_daemon(config: Path, log: Path) -> subprocess.Popen[bytes]:
    """`lanes daemon --config` as a process of its own, its log in `log`; the test stops it by its pid."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(LANES), "daemon", "--config", str(config)], stdout=out, stderr=subprocess.STDOUT, env=LANES_ENV
        )


def _outcome(db: Path, sha: str) -> str | None:
    if not db.exists():
        return None
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            row = conn.execute("select outcome from commits where sha = ?", (sha,)).fetchone()
    except sqlite3.OperationalError:
        return None
    return str(row[0]) if row else None


def _running(rig: Rig, host: str) -> list[str]:
    names = [str(c.get("Name", "")).lstrip("/") for c in rig.containers(host) if c.get("State", {}).get("Running")]
    return [n for n in names if n.startswith(f"lanes-{LANE}-")]


def _only(stream: Stream, allowed: set[int]) -> None:
    statuses = stream.statuses()
    assert set(statuses) <= allowed, (statuses, [a for a in stream.answers if a[0] not in allowed][:5])


async def test_rollouts_through_the_real_gateway_in_front_of_the_rigs_engines(rig: Rig, tmp_path: Path) -> None:
    assert rig.images is not None
    gateway = Gateway(tmp_path)
    gateway.start()
    daemon: subprocess.Popen[bytes] | None = None
    db = rig.folder / "daemon" / "daemon.db"
    fleet_file = rig.repo.work / "state" / "fleet.yaml"
    fleet_before = fleet_file.read_text()
    try:
        _fleet_gateway(rig, gateway)
        first = rig.publish({LANE: rig.lane(LANE, ["rig1"], served=MODEL)}, "chat on rig1")
        daemon = _start_daemon(_daemon_config(rig, gateway), rig.folder / "daemon" / "log")
        await wait_for(lambda: _outcome(db, first) == "applied", 120, "the lane deployed by the daemon")
        await until_served(gateway, "the model served through the gateway", 60, MODEL)

        # 1. In place: the same host, a new image.
        async with streaming(gateway, MODEL) as stream:
            await asyncio.sleep(1.0)
            loads = rig.lane(LANE, ["rig1"], image_ref=rig.images.v2, served=MODEL, env={"STANDIN_LOAD_S": "3"})
            head = rig.publish({LANE: loads}, "in place, a build that loads for 3 s")
            await wait_for(lambda: _outcome(db, head) == "applied", 120, "the in-place change")
            await until_served(gateway, "served again", 30, MODEL)
        _only(stream, {200, 503})
        assert stream.statuses()[503] > 0  # the model was away while its engine loaded: said so, with a time
        assert all(a is not None and int(a) >= 1 for s, a, _ in stream.answers if s == 503)
        await until_settled(gateway, "the holding worker gone", 30, MODEL)

        # 2. Blue/green onto rig2, which is free.
        async with streaming(gateway, MODEL) as stream:
            await asyncio.sleep(1.0)
            moved = rig.lane(LANE, ["rig2"], image_ref=rig.images.v2, served=MODEL, env={"STANDIN_LOAD_S": "3"})
            head = rig.publish({LANE: moved}, "to rig2")
            await wait_for(lambda: _outcome(db, head) == "applied", 120, "the blue/green change")
            await asyncio.sleep(1.0)
        _only(stream, {200})
        assert _running(rig, "rig1") == [] and len(_running(rig, "rig2")) == 1

        # 3. A build slow to its first token onto rig3: aborted back to rig2 in the watch window.
        # The watch window's own check (no pre-promotion benchmark, which would refuse this build first).
        _fleet_gateway(rig, gateway, {LANE: {"watch_s": 30, "max_ttft_s": 0.1, "drain_s": 10, "max_slowdown": None}})
        slow = rig.lane(LANE, ["rig3"], image_ref=rig.images.v2, served=MODEL, env={"STANDIN_PP_TPS": "5"})
        async with streaming(gateway, MODEL) as stream:
            await asyncio.sleep(1.0)
            head = rig.publish({LANE: slow}, "slow build to rig3")
            await wait_for(lambda: _outcome(db, head) not in (None, "applying"), 120, "the abort")
            await asyncio.sleep(1.0)
        assert _outcome(db, head) == "failed"
        _only(stream, {200})
        assert len(_running(rig, "rig2")) == 1 and _running(rig, "rig3") == []
        note = read_note(pygit2.Repository(str(rig.folder / "daemon" / "mirror")), head) or ""
        assert "watch window" in note, note
    finally:
        if daemon is not None:
            daemon.terminate()
            try:
                daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(timeout=10)
        gateway.kill()
        for host in ("rig1", "rig2", "rig3"):
            for name in _running(rig, host):
                rig.docker(host, "rm", "-f", "-t", "0", name, check=False)
        # The rig is every rig test's: its fleet file goes back as it was, without the gateway (which names a
        # lane the next test does not publish), and the forge's head with it.
        fleet_file.write_text(fleet_before)
        rig.publish({}, "rig: the gateway test's fleet file undone")
