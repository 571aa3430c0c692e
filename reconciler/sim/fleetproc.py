"""A simulated fleet in a process of its own: `python -m reconciler.sim.fleetproc SPEC.json`.

Measuring the daemon against a thousand simulated hosts needs the hosts out
of the daemon's process, so that its memory and CPU are its own, and out of
the measuring process, so that its waits never stall an SSH server. The
spec (JSON) says what to stand up:

  {"hosts": [NAME, ...], "base_address": "127.x.", "work_dir": PATH, "shared_standin": true,
   "images": {REF: {ENV: VALUE}}, "models": {HOST: [[PATH, BYTES], ...]},
   "data_plane": {HOST: [[INTERFACE, ADDRESS/PREFIX, HCA or null], ...]}}

The process prints one line when every host answers SSH: {"port", "known_hosts",
"client_key", "addresses", "standin_pid", "pid"}. Then, for each line "counts" on
its stdin, it prints {HOST: [commands run, connections accepted, bytes in, bytes out, channels opened,
session requests]} (`SimHost` says what each counts). End of
stdin (the parent closed it, or died) closes the fleet, every container and
the shared stand-in with it, and ends the process. `FleetProcess` is the
parent's side.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from reconciler.sim.registry import SimRegistry
from reconciler.sim.sshd import SimFleet


async def serve(spec: dict[str, Any]) -> None:
    registry = SimRegistry()
    for ref, env in spec.get("images", {}).items():
        registry.add(ref, env=env)
    fleet = SimFleet(
        spec["hosts"],
        base_address=spec["base_address"],
        registry=registry,
        work_dir=Path(spec["work_dir"]),
        shared_standin=bool(spec.get("shared_standin", True)),
    )
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    # SIGTERM from whoever started us ends the loop the way end of stdin does, so the fleet is closed.
    loop.add_signal_handler(signal.SIGTERM, stdin.feed_eof)
    async with fleet:
        for host, paths in spec.get("models", {}).items():
            for path, size in paths:
                fleet.runtime(host).add_model_path(path, int(size))
        for host, ports in spec.get("data_plane", {}).items():
            # (interface, address, hca) as the host file says, so the hosts' facts agree with the state.
            fleet.runtime(host).facts.info.set_data_plane([(str(i), str(a), h) for i, a, h in ports])
        ready = {
            "port": fleet.port,
            "known_hosts": str(fleet.known_hosts_path),
            "client_key": str(fleet.client_key_path),
            "addresses": fleet.addresses,
            "standin_pid": fleet.standin.pid if fleet.standin is not None else 0,
            "pid": os.getpid(),
        }
        _say(ready)
        while line := await stdin.readline():
            if line.strip() == b"counts":
                hosts = [(n, fleet.host(n)) for n in fleet.names]
                _say(
                    {
                        n: [len(h.commands), h.handshakes, h.bytes_in, h.bytes_out, h.channels, h.requests]
                        for n, h in hosts
                    }
                )


def _say(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    asyncio.run(serve(spec))
    return 0


class FleetProcess:
    """The parent's handle on a `fleetproc` child: start it, ask it for counts, end it by pid."""

    def __init__(self, spec: dict[str, Any], work_dir: Path) -> None:
        self.spec = spec
        self.work_dir = Path(work_dir)
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready: dict[str, Any] = {}
        self._pending = b""

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def start(self, timeout: float = 600.0) -> dict[str, Any]:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        spec_path = self.work_dir / "fleet-spec.json"
        spec_path.write_text(json.dumps(self.spec))
        with (self.work_dir / "fleet.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "reconciler.sim.fleetproc", str(spec_path)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,  # ^C reaches the parent only, which then ends us in order
            )
        self.ready = self._line(timeout)
        return self.ready

    def counts(self, timeout: float = 60.0) -> dict[str, tuple[int, int, int, int, int, int]]:
        """Per host: commands run (a session's requests among them), SSH connections accepted, bytes received
        and sent, exec channels opened and session requests received, so far."""
        if self.proc is None or self.proc.stdin is None:
            raise RuntimeError("the simulated fleet is not running")
        self.proc.stdin.write(b"counts\n")
        self.proc.stdin.flush()
        rows = self._line(timeout).items()
        return {h: (int(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4]), int(r[5])) for h, r in rows}

    def _line(self, timeout: float) -> dict[str, Any]:
        if self.proc is None or self.proc.stdout is None:
            raise RuntimeError("the simulated fleet is not running")
        out: IO[bytes] = self.proc.stdout
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(out, selectors.EVENT_READ)
            while b"\n" not in self._pending:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    raise TimeoutError(f"the simulated fleet did not answer within {timeout:g} s")
                chunk = os.read(out.fileno(), 1 << 20)
                if not chunk:
                    raise RuntimeError(f"the simulated fleet ended; see {self.work_dir / 'fleet.log'}")
                self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        obj: dict[str, Any] = json.loads(line)
        return obj

    def close(self, timeout: float = 60.0) -> None:
        """Close its stdin (it closes the fleet and exits), then SIGKILL it and its stand-in by pid if left."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
        standin = int(self.ready.get("standin_pid") or 0)
        with contextlib.suppress(OSError):  # already gone, as it should be: it ends at the end of its stdin
            # Checked by its command line, so a recycled pid is never hit; orphaned, it is reaped by init.
            if b"sharedstandin" in Path(f"/proc/{standin}/cmdline").read_bytes():
                os.kill(standin, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
