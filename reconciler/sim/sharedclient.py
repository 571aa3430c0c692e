"""The simulator's side of the shared stand-in: start it, open and close containers' engines in it.

`SimFleet(shared_standin=True)` starts one `sharedstandin` process and hands
this client to every host's runtime; `docker run` then opens the container's
engine there (a socket on the host's address) instead of spawning a process,
and `docker stop`/`rm` close it. A container the shared process ends on its
own (it could not bind its port, or was told to crash) is reported back and
shows as exited with that code, as a dead engine process would. If the shared
process itself dies, every container it served reads as killed (137).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import reconciler

_PACKAGE_ROOT = str(Path(reconciler.__file__).resolve().parent.parent)
KILLED = 137  # 128 + SIGKILL, what docker reports for a container whose process was killed
REPLY_TIMEOUT_S = 30.0


class SharedStandinError(RuntimeError):
    """The shared stand-in process is not there to ask."""


class SharedStandinClient:
    """One shared stand-in process, driven over its stdin/stdout."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = Path(work_dir)
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._seq = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[None]] = {}
        self._exited: dict[str, int] = {}
        self._gone = False

    @property
    def pid(self) -> int:
        """The shared process's pid (what `docker inspect` shows as each container's State.Pid)."""
        return self._proc.pid if self._proc is not None else 0

    async def start(self) -> None:
        if self._proc is not None:
            return
        self.work_dir.mkdir(parents=True, exist_ok=True)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": _PACKAGE_ROOT}
        with (self.work_dir / "shared-standin.err").open("ab") as err:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "reconciler.sim.sharedstandin",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                env=env,
                cwd=self.work_dir,
                start_new_session=True,  # a ^C in a terminal goes to the simulator, which then closes us
            )
        assert self._proc.stdout is not None
        self._reader = asyncio.create_task(self._read(self._proc.stdout))

    def exited(self, cid: str) -> int | None:
        """The exit code of a container the shared process ended on its own, or None while it runs."""
        if cid in self._exited:
            return self._exited[cid]
        return KILLED if self._gone else None

    async def open(
        self,
        cid: str,
        *,
        bind: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        log_path: Path,
        worker: bool,
    ) -> None:
        """Start the container's engine (its HTTP socket on `bind`, unless it is a worker rank)."""
        await self._request(
            {"op": "open", "id": cid, "bind": bind, "argv": list(argv), "env": dict(env), "log": str(log_path)}
            | {"worker": worker}
        )

    async def close_container(self, cid: str, code: int) -> None:
        """End the container's engine: code 0 for a stop (SIGTERM), 137 for a kill."""
        self._exited.pop(cid, None)
        if not self._gone:
            await self._request({"op": "close", "id": cid, "code": code})

    async def close(self) -> None:
        """End the shared process: close its stdin, give it 5 s, then SIGKILL it by pid."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
            with contextlib.suppress(ConnectionError):
                await proc.stdin.wait_closed()
        try:
            await asyncio.wait_for(proc.wait(), 5.0)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        if self._reader is not None:
            await self._reader

    async def _request(self, msg: dict[str, Any]) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or self._gone:
            raise SharedStandinError("the shared stand-in process is not running")
        seq = next(self._seq)
        reply: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[seq] = reply
        try:
            proc.stdin.write(json.dumps({"seq": seq, **msg}).encode() + b"\n")
            await proc.stdin.drain()
            await asyncio.wait_for(reply, REPLY_TIMEOUT_S)
        except (ConnectionError, TimeoutError) as exc:
            raise SharedStandinError(f"the shared stand-in did not answer: {exc!r}") from None
        finally:
            self._waiting.pop(seq, None)

    async def _read(self, stdout: asyncio.StreamReader) -> None:
        while line := await stdout.readline():
            msg = json.loads(line)
            if msg.get("event") == "exited":
                self._exited[str(msg["id"])] = int(msg["code"])
                continue
            waiter = self._waiting.get(int(msg["seq"]))
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        self._gone = True  # end of its stdout: the process ended (or was killed)
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(SharedStandinError("the shared stand-in process ended"))
