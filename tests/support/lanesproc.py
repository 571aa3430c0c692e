"""The `lanes` command and the `lanes daemon` as child processes of a test, over simulated Sparks.

`run_lanes` runs the CLI and returns what it printed. A daemon is a config written by `write_config`
(pointing at a state repo and at the simulated Sparks), a process started by `spawn_daemon`, and a JSON
log. `DaemonProc` holds all three, with the daemon's HTTP endpoint and read-only views of its sqlite file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support import forkserver
from tests.support.sparks import DemoEnv
from tests.support.storeview import StoreView

WEBHOOK_SECRET = "s3cret-for-tests"
Child = asyncio.subprocess.Process | forkserver.Forked
"""A `lanes` process a test started: a real interpreter, or a child of the fork server (the same program)."""
CONTROL_TOKEN = "control-token-for-tests"
"""The bearer token of every test daemon's control API (`[http] control_token_file`)."""


async def run_lanes(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """The real `lanes` command as a process (never blocking the loop: simulated hosts may run on it)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        forked = await forkserver.spawn(args, (0, out_w, err_w), env)
    finally:
        os.close(out_w)
        os.close(err_w)
    if forked is None:
        os.close(out_r)
        os.close(err_r)
        return await _exec_lanes(*args, env=env)
    try:
        out, err, _ = await asyncio.wait_for(asyncio.gather(_read_all(out_r), _read_all(err_r), forked.wait()), 120)
    finally:
        await end_process(forked)  # timed out or cancelled: the process does not outlive the test
    assert forked.returncode is not None
    return forked.returncode, out.decode(), err.decode()


async def _read_all(fd: int) -> bytes:
    """Everything written to the pipe `fd` until its writers closed it (then closed here)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 26)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb"))
    try:
        return await reader.read()
    finally:
        transport.close()


async def _exec_lanes(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "reconciler.cli.main", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        await end_process(proc)  # timed out or cancelled: the process does not outlive the test
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def spawn_daemon(config: Path, log: Path) -> Child:
    """`lanes daemon --config` as a real process; its JSON log lines (stdout) and stderr go to `log`."""
    args = ("daemon", "--config", str(config))
    with log.open("ab") as out:
        forked = await forkserver.spawn(args, (0, out.fileno(), out.fileno()))
        if forked is not None:
            return forked
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "reconciler.cli.main", *args,
            stdout=out, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip


async def end_process(proc: Child | None) -> None:
    """Kill `proc` if it still runs, and reap it (a process that already exited is only reaped)."""
    if proc is None:
        return
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    await proc.wait()


def write_config(
    tmp: Path,
    repo: Path,
    env: DemoEnv,
    *,
    http_port: int,
    extra: str = "",
    resync_s: float = 300,
    fetch_s: float = 30,
    owner: str = "lanes-test",
    log_level: str = "warning",
    url: str | None = None,
    db: Path | None = None,
    connect_timeout_s: float | None = None,
    health_s: float | None = None,
) -> Path:
    """`tmp/reconciler.toml`: a daemon watching `repo` (or `url`) and driving the simulated Sparks of `env`.

    `extra` goes into [repo]; the database is `tmp/daemon.db` unless `db` says otherwise.
    """
    hosts = "\n".join(
        f'[hosts.{name}]\naddress = "{t.address}"\nport = {t.port}\nuser = "{t.user}"\n'
        for name, t in env.fleet.targets.items()
    )
    ssh_timeout = f"connect_timeout_s = {connect_timeout_s}\n" if connect_timeout_s is not None else ""
    health = f"health_interval_s = {health_s}\n" if health_s is not None else ""
    text = f'''[repo]
url = "{url or repo}"
branch = "main"
mirror_dir = "{tmp / "mirror"}"
fetch_interval_s = {fetch_s}
resync_interval_s = {resync_s}
{extra}
[ssh]
{ssh_timeout}key = "{env.fleet.client_key_path}"
known_hosts = "{env.fleet.known_hosts_path}"
[daemon]
owner = "{owner}"
db = "{db or tmp / "daemon.db"}"
secrets_dir = "{env.workdir / "secrets"}"
log_level = "{log_level}"
{health}[http]
listen = "127.0.0.1:{http_port}"
webhook_secret_file = "{tmp / "webhook-secret"}"
control_token_file = "{tmp / "control-token"}"
{hosts}'''
    (tmp / "webhook-secret").write_text(WEBHOOK_SECRET + "\n")
    (tmp / "control-token").write_text(CONTROL_TOKEN + "\n")
    path = tmp / "reconciler.toml"
    path.write_text(text)
    return path


def log_events(log: Path, name: str | None = None) -> list[dict[str, Any]]:
    """The JSON events of a daemon's log (all, or those named `name`); other lines are skipped."""
    out = []
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        with contextlib.suppress(ValueError):
            data = json.loads(line)
            if isinstance(data, dict) and (name is None or data.get("event") == name):
                out.append(data)
    return out


@dataclass
class DaemonProc(StoreView):
    """One `lanes daemon` process: its folder, config, owner, sqlite file, HTTP endpoint and log."""

    name: str
    dir: Path
    config: Path
    port: int
    owner: str
    db: Path
    proc: Child | None = None

    @property
    def log(self) -> Path:
        return self.dir / "daemon.log"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self) -> None:
        self.proc = await spawn_daemon(self.config, self.log)

    def kick(self) -> None:
        """SIGHUP: the daemon reloads its config and reconciles at once, as its resync would later."""
        assert self.proc is not None and self.proc.returncode is None
        self.proc.send_signal(signal.SIGHUP)

    async def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Send `sig` (SIGTERM: the daemon must exit 0) and wait for the exit; its exit code."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        self.proc = None
        return code

    async def kill(self) -> None:
        """The end of a test, however it went: no daemon left running."""
        await end_process(self.proc)
        self.proc = None

    # -- the log -----------------------------------------------------------------

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        return log_events(self.log, name)

    # -- HTTP ----------------------------------------------------------------------

    async def get(self, path: str) -> tuple[int, str]:
        async with httpx.AsyncClient(timeout=30) as client:
            response = await client.get(f"http://127.0.0.1:{self.port}{path}")
        return response.status_code, response.text

    async def status(self) -> dict[str, Any]:
        code, text = await self.get("/status")
        assert code == 200, text
        data: dict[str, Any] = json.loads(text)
        return data

    async def metric(self, name: str) -> float:
        _, text = await self.get("/metrics")
        for line in text.splitlines():
            if line.startswith((name + " ", name + "{")):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"{name} not in /metrics")
