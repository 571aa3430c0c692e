"""One simulated container: a real stand-in process plus the record docker keeps about it.

Docker's view of a container (state, exit code, labels, env, start time)
is what the reconciler reads back, and it must follow the process: a
stand-in that crashes shows `exited` with its exit code at the next
`docker ps`, exactly when a real engine's container would. The process is
started from an argv list (never a shell) and stopped by its pid. With a
`SharedStandinClient` the container's engine is instead a socket in the one
shared stand-in process (big simulated fleets); the record follows it the
same way: stopped is exit 0, killed 137, a crash or a port it cannot bind 1.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import reconciler
from reconciler.facts.labels import LABEL_RANK
from reconciler.sim.registry import SimImage
from reconciler.sim.sharedclient import KILLED, SharedStandinClient
from reconciler.sim.standin_ray import ADDRESSES_ENV, address_map

ZERO_TIME = "0001-01-01T00:00:00Z"  # what docker shows for "never"
_PACKAGE_ROOT = str(Path(reconciler.__file__).resolve().parent.parent)


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _ago(seconds: float) -> str:
    if seconds < 60:
        return f"{int(seconds)} seconds"
    if seconds < 3600:
        return f"{int(seconds // 60)} minutes"
    return f"{int(seconds // 3600)} hours"


@dataclass
class SimContainer:
    """A container record; `process` is the live stand-in while it runs."""

    id: str
    name: str
    image_ref: str  # as given to `docker run`
    image: SimImage
    labels: dict[str, str]
    env: list[str]  # Config.Env: image env, then -e, then --env-file
    cmd: list[str]
    entrypoint: list[str]
    host_config: dict[str, Any]
    log_path: Path
    auto_remove: bool = False
    created: str = field(default_factory=now_rfc3339)
    status: str = "created"
    exit_code: int = 0
    error: str = ""  # State.Error: why a container that was created never started
    started_at: str = ZERO_TIME
    finished_at: str = ZERO_TIME
    pid: int = 0
    process: subprocess.Popen[bytes] | None = None
    shared: SharedStandinClient | None = None  # set: the engine lives in the shared stand-in process
    _created_mono: float = field(default_factory=time.monotonic)
    _started_mono: float = 0.0
    _finished_mono: float = 0.0

    @property
    def worker(self) -> bool:
        return self.labels.get(LABEL_RANK, "0") != "0"

    def _env(self) -> dict[str, str]:
        env = {}
        for pair in self.env:
            key, _, value = pair.partition("=")
            env[key] = value
        return env

    async def launch(self, address: str, work_dir: Path, peers: Mapping[str, str] | None = None) -> None:
        """Start the container's engine: a process of its own, or a socket in the shared stand-in."""
        if self.shared is None:
            self.start(address, work_dir, peers)
            return
        await self.shared.open(
            self.id,
            bind=address,
            argv=self.entrypoint + self.cmd,
            env=self._env(),
            log_path=self.log_path,
            worker=self.worker,
        )
        self.pid = self.shared.pid
        self._mark_running()

    def start(self, address: str, work_dir: Path, peers: Mapping[str, str] | None = None) -> None:
        """Spawn the stand-in for this container (argv list, own session, log to a file).

        `peers` maps the addresses lanes renders (data plane, control) to the simulated hosts' own."""
        worker = self.worker
        argv = [sys.executable, "-m", "reconciler.sim.standin", "--bind", address]
        argv += ["--worker"] if worker else []
        argv += ["--", *self.entrypoint, *self.cmd]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": _PACKAGE_ROOT,
            "STANDIN_PARENT_PID": str(os.getpid()),  # not in Config.Env: sim plumbing, not the image's
        }
        if peers:
            env[ADDRESSES_ENV] = address_map(peers)  # sim plumbing too
        env.update(self._env())
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=work_dir,
                start_new_session=True,  # a ^C in the test runner goes to the runner, not the "engines"
            )
        self.pid = self.process.pid
        self._mark_running()

    def _mark_running(self) -> None:
        self.status = "running"
        self.exit_code = 0
        self.started_at = now_rfc3339()
        self.finished_at = ZERO_TIME
        self._started_mono = time.monotonic()

    def mark_exited(self, code: int) -> None:
        self.exit_code = code
        self.status = "exited"
        self.finished_at = now_rfc3339()
        self._finished_mono = time.monotonic()

    def refresh(self) -> None:
        """Follow the process: reap it if it died and record how."""
        if self.shared is not None:
            code = self.shared.exited(self.id) if self.status == "running" else None
            if code is not None:
                self.mark_exited(code)
            return
        if self.process is None:
            return
        code = self.process.poll()
        if code is None:
            return
        # A signal death is reported the way docker does: 128 + signal number.
        self.mark_exited(code if code >= 0 else 128 - code)
        self.process = None

    async def _end_shared(self, shared: SharedStandinClient, code: int) -> None:
        self.refresh()
        if self.status == "running":
            await shared.close_container(self.id, code)
            self.mark_exited(code)

    async def stop(self, timeout_s: float) -> None:
        """SIGTERM, wait up to `timeout_s`, then SIGKILL (docker stop semantics)."""
        if self.shared is not None:
            await self._end_shared(self.shared, 0)  # a stand-in exits 0 on SIGTERM, at once
            return
        self.refresh()
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)
        if not await self._wait(timeout_s):
            self.process.kill()
            await self._wait(10.0)

    async def kill(self) -> None:
        if self.shared is not None:
            await self._end_shared(self.shared, KILLED)
            return
        self.refresh()
        if self.process is not None:
            self.process.kill()
            await self._wait(10.0)

    async def _wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            self.refresh()
            if self.process is None:
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.01)

    @property
    def running(self) -> bool:
        self.refresh()
        return self.status == "running"

    def status_text(self) -> str:
        self.refresh()
        if self.status == "running":
            return "Up " + _ago(time.monotonic() - self._started_mono)
        if self.status == "exited":
            return f"Exited ({self.exit_code}) {_ago(time.monotonic() - self._finished_mono)} ago"
        return "Created"

    def inspect(self) -> dict[str, Any]:
        """`docker inspect` of this container (the fields lanes and people read)."""
        self.refresh()
        return {
            "Id": self.id,
            "Created": self.created,
            "Path": (self.entrypoint + self.cmd)[0] if (self.entrypoint + self.cmd) else "",
            "Args": (self.entrypoint + self.cmd)[1:],
            "State": {
                "Status": self.status,
                "Running": self.status == "running",
                "Paused": False,
                "Restarting": False,
                "OOMKilled": False,
                "Dead": False,
                "Pid": self.pid if self.status == "running" else 0,
                "ExitCode": self.exit_code,
                "Error": self.error,
                "StartedAt": self.started_at,
                "FinishedAt": self.finished_at,
            },
            "Image": self.image.image_id,
            "Name": "/" + self.name,
            "RestartCount": 0,
            "HostConfig": self.host_config,
            "Config": {
                "Image": self.image_ref,
                "Labels": dict(self.labels),
                "Env": list(self.env),
                "Cmd": list(self.cmd),
                "Entrypoint": list(self.entrypoint) or None,
            },
        }

    def ps_row(self) -> dict[str, Any]:
        """The object `docker ps --format '{{json .}}'` prints for this container."""
        self.refresh()
        command = " ".join(self.entrypoint + self.cmd)
        return {
            "Command": '"' + (command[:17] + "…" if len(command) > 20 else command) + '"',
            "CreatedAt": self.created.replace("T", " ")[:19] + " +0000 UTC",
            "ID": self.id[:12],
            "Image": self.image_ref,
            "Labels": ",".join(f"{k}={v}" for k, v in sorted(self.labels.items())),
            "LocalVolumes": "0",
            "Mounts": "",
            "Names": self.name,
            "Networks": self.host_config.get("NetworkMode", "default"),
            "Ports": "",
            "RunningFor": _ago(time.monotonic() - self._created_mono) + " ago",
            "Size": "0B",
            "State": self.status,
            "Status": self.status_text(),
        }
