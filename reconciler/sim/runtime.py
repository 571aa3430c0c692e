"""A simulated Spark's command interpreter: what runs when the reconciler execs an argv there.

A host receives two kinds of commands: `docker ...` argv lists and the
`reconciler.facts` commands (probe, lease, env file, drop caches). This is
the single entry point for both, `execute(argv, stdin) -> (status, stdout,
stderr)`, so the SSH server (`sshd`) and tests can drive a host the same
way. Facts commands are recognised by their marker and answered with the
real scripts' semantics; their argv must be exactly what `facts.commands`
builds, so a drift between the two is caught here. Anything else is "not
found", as on a host that lacks the program.

Every container is a real stand-in process (or, with `shared`, a socket in
the one shared stand-in process); `shutdown()` ends them all, and
`alive_pids()` lets tests prove none leaked.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from reconciler.facts import commands as fc
from reconciler.facts.gpu_script import GPU_FREE_EXIT_BUSY
from reconciler.facts.labels import LABEL_MANAGED, LABEL_RANK, MANAGED_VALUE
from reconciler.facts.probe_serve import read_request_line
from reconciler.sim import modelfiles
from reconciler.sim.containers import SimContainer
from reconciler.sim.dockerd import Result, SimDockerDaemon
from reconciler.sim.engineargs import scan_engine_argv
from reconciler.sim.hostfacts import GIB, EnvFile, SimHostFacts
from reconciler.sim.netstat import ListeningTable
from reconciler.sim.probefiles import Refusal, SimProbeFiles
from reconciler.sim.registry import SimRegistry
from reconciler.sim.sharedclient import SharedStandinClient
from reconciler.sim.standin_ray import engine_argv


class SimContainerRuntime:
    """One simulated host's docker and host-side facts, driven by argv lists."""

    def __init__(
        self,
        host_name: str,
        address: str,
        images: SimRegistry,
        work_dir: Path,
        *,
        memory_per_container: int = 10 * GIB,
        clock: Callable[[], float] = time.time,
        shared: SharedStandinClient | None = None,
        ports: ListeningTable | None = None,
    ) -> None:
        self.host_name = host_name
        self.address = address
        self.registry = images
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.facts = SimHostFacts(memory_per_container=memory_per_container, clock=clock)
        self.models = modelfiles.SimModelFiles(self.facts)  # model folders: checks, listings, removals
        self.daemon = SimDockerDaemon(address, images, self.work_dir, self._read_envfile, shared)
        self.daemon.device_paths = self._device_paths  # docker finds the devices the probe reports
        self.daemon.driver_cuda = lambda: self.facts.info.cuda if self.facts.info.driver else None
        self.ports = ports or ListeningTable()  # the fleet's shared table, or one read afresh on every probe
        self.probe_files = SimProbeFiles(self.work_dir / "fs")  # the installed probe program, a real file
        self.docker_available = True  # False: a host where `docker` is not installed
        self.latency: dict[str, float] = {}
        """Seconds to wait before answering, by fact marker (`lanes-lease`) or `docker <verb>`."""

    def _device_paths(self) -> set[str]:
        return self.facts.info.device_paths()  # looked up each time: a test may swap the host's facts

    # -- what tests set up and look at --------------------------------------

    def add_model_path(self, path: str, size: int) -> None:
        self.facts.add_model_path(path, size)

    @property
    def envfiles(self) -> dict[str, EnvFile]:
        return self.facts.envfiles

    @property
    def containers(self) -> dict[str, SimContainer]:
        return self.daemon.containers

    def alive_pids(self) -> list[int]:
        """Pids of stand-in processes this runtime started that are still running."""
        return [c.pid for c in self.daemon.spawned if c.running]

    def serving_port(self, name: str) -> int | None:
        """The port a head-rank container serves on (from its engine argv)."""
        c = self.daemon.containers.get(name)
        if c is None or c.labels.get(LABEL_RANK, "0") != "0":
            return None
        return scan_engine_argv(engine_argv(c.entrypoint + c.cmd)).port  # a Ray head: its vllm serve

    @staticmethod
    def wants_stdin(argv: Sequence[str]) -> bool:
        """Whether the command reads stdin (the env-file writer, the model check and the model folders)."""
        if modelfiles.wants_stdin(list(argv)):
            return True
        marker = fc.command_marker(argv)
        if marker == fc.PROBE_MARKER:
            return argv[3] == fc.LAUNCHER_SCRIPT and list(argv[5:6]) == ["install"]  # the program comes on stdin
        return marker == fc.ENVFILE_MARKER and list(argv[5:6]) == ["write"]

    @staticmethod
    def is_probe_session(argv: Sequence[str]) -> bool:
        """Whether `argv` starts a probe session (`facts/probe_serve.py`): it answers request lines on stdin."""
        return fc.command_marker(argv) == fc.PROBE_MARKER and argv[3] == fc.LAUNCHER_SCRIPT and argv[5:6] == ["serve"]

    def open_probe_session(self, argv: Sequence[str]) -> Refusal | None:
        """What the launcher does before the program serves: the argv exactly as `facts.commands` builds it,
        then the installed copy read and checked against its hash. None: the session may answer requests."""
        wrong = _session_argv_refusal(argv)
        if wrong is not None:
            return 2, wrong
        path, program_hash = fc.read_probe_session_argv(argv)
        return self.probe_files.check(path, program_hash)

    # -- the one entry point -------------------------------------------------

    async def execute(self, argv: list[str], stdin: str | None = None) -> Result:
        if not argv:
            return 0, "", ""
        if modelfiles.handles(argv):
            return self.models.execute(argv, stdin or "")
        marker = fc.command_marker(argv)
        delay = self.latency.get(marker or " ".join(argv[:2]), 0.0)
        if delay:
            # A slow host (or a slow pull, stop, lease): lets tests land a fault inside a given step.
            await asyncio.sleep(delay)
        if marker == fc.GPUFREE_MARKER:
            return await self._gpu_free(argv)
        if marker is not None:
            return self._fact_command(marker, argv, stdin)
        if argv[0] == "docker" and self.docker_available:
            try:
                return await self.daemon.docker(argv[1:])
            finally:
                self.ports.invalidate()  # a container started or ended: its engine's socket came or went
        return 127, "", f"sh: {argv[0]}: not found\n"

    async def _gpu_free(self, argv: list[str]) -> Result:
        """What facts/gpu_script.py prints here: the GPU is held while an ended rank's context is torn down."""
        try:
            timeout = float(argv[-1])
        except ValueError:
            return 2, "", "lanes-gpufree: timeout is not a number\n"
        if list(argv) != fc.gpufree_argv(timeout):
            return 2, "", "lanes-gpufree: argv differs from what reconciler.facts.commands builds\n"
        held = self.daemon.gpu_held_for()
        if held > timeout:
            await asyncio.sleep(timeout)
            busy = [{"pid": 4242, "name": "python3"}]
            return GPU_FREE_EXIT_BUSY, json.dumps({"gpu": "busy", "waited_s": timeout, "busy": busy}) + "\n", ""
        await asyncio.sleep(held)
        return 0, json.dumps({"gpu": "free", "waited_s": round(held, 3)}) + "\n", ""

    def _fact_command(self, marker: str, argv: list[str], stdin: str | None) -> Result:
        if self.is_probe_session(argv):
            return self._probe_request(argv, stdin or "")
        try:
            if marker == fc.PROBE_MARKER:
                probe = fc.read_probe_argv(argv)
                paths = (probe.model_paths, probe.lease_file, probe.disk_path)
                if probe.mode == "inline":
                    expected = fc.probe_argv(*paths)
                else:
                    assert probe.program_path is not None
                    assert probe.mode != "serve"  # read_probe_argv reads run and install only
                    expected = fc.installed_probe_argv(probe.mode, probe.program_path, probe.known, *paths)
            elif marker == fc.LEASE_MARKER:
                lease = fc.read_lease_argv(argv)
                expected = fc.lease_argv(lease.action, lease.lease_file, lease.owner, lease.ttl_s)
            elif marker == fc.ENVFILE_MARKER:
                envreq = fc.read_envfile_argv(argv)
                write = envreq.action == "write"
                expected = fc.envfile_argv(envreq.paths[0]) if write else fc.envfile_remove_argv(envreq.paths)
            else:
                expected = fc.dropcaches_argv()
        except ValueError as exc:
            return 2, "", f"{marker}: {exc}\n"
        if list(argv) != expected:
            return 2, "", f"{marker}: argv differs from what reconciler.facts.commands builds\n"
        if marker == fc.PROBE_MARKER:
            if probe.mode != "inline":
                install = probe.mode == "install"
                if install:
                    refused = self.probe_files.install(probe, stdin or "")
                else:
                    assert probe.program_path is not None
                    assert probe.program_hash is not None
                    refused = self.probe_files.check(probe.program_path, probe.program_hash)
                if refused is not None:
                    return refused[0], "", refused[1]
            return 0, self._probe(probe), ""
        if marker == fc.LEASE_MARKER:
            status, out = self.facts.lease(lease)
            return status, out, ""
        if marker == fc.ENVFILE_MARKER:
            status, err = self.facts.envfile(envreq, stdin or "")
            return status, "", err
        self.facts.drop_caches()
        return 0, "", ""

    def _probe_request(self, argv: list[str], line: str) -> Result:
        """One request line of an open session (`sshd` checked the session's argv and installed copy when it
        opened, as the launcher does once before the program serves): the program's answer, or its refusal of a
        malformed request (exit 2, the program's message; the session ends)."""
        wrong = _session_argv_refusal(argv)
        if wrong is not None:
            return 2, "", wrong
        try:
            request = read_request_line(line)
        except ValueError as exc:
            return 2, "", f"lanes-probe: malformed request: {exc}\n"
        return 0, self._probe(request), ""

    def _probe(self, request: fc.ProbeRequest) -> str:
        self.daemon.reap_auto_removed()
        everything = list(self.daemon.containers.values())
        for c in everything:
            c.refresh()  # a stand-in that died since the last look shows as exited
        managed = [c for c in everything if c.labels.get(LABEL_MANAGED) == MANAGED_VALUE]
        others = [c for c in everything if c.labels.get(LABEL_MANAGED) != MANAGED_VALUE]
        return self.facts.probe(
            request,
            hostname=self.host_name,
            containers=[_probe_view(c) for c in managed] if self.docker_available else None,
            unmanaged=[{"name": c.name, "image": c.image_ref, "state": c.status} for c in others]
            if self.docker_available
            else [],
            listening=self.listening_ports(),
            running=sum(1 for c in everything if c.running),
        )

    def listening_ports(self) -> list[int]:
        """TCP ports listening on this host's address, read from the machine's /proc/net/tcp.

        Each simulated host owns one loopback address, so the sockets bound to
        it are exactly this host's: its SSH server and its running stand-ins.
        """
        return self.ports.ports(self.address)

    def _read_envfile(self, path: str) -> str | None:
        return self.facts.read_envfile(path)

    async def shutdown(self) -> None:
        """End every process this host started: SIGTERM, then SIGKILL after 2 s."""
        await asyncio.gather(*(c.stop(2.0) for c in self.daemon.spawned))


def _session_argv_refusal(argv: Sequence[str]) -> str | None:
    """None when `argv` is a probe session's exactly as `facts.commands` builds it; else what the host says."""
    try:
        path, _ = fc.read_probe_session_argv(argv)
    except ValueError as exc:
        return f"{fc.PROBE_MARKER}: {exc}\n"
    if list(argv) != fc.probe_session_argv(path):
        return f"{fc.PROBE_MARKER}: argv differs from what reconciler.facts.commands builds\n"
    return None


def _probe_view(c: SimContainer) -> dict[str, Any]:
    """What the probe script extracts from `docker inspect` for one container."""
    data = c.inspect()
    return {
        "name": c.name,
        "id": c.id,
        "image": data["Config"]["Image"],
        "image_id": data["Image"],
        "state": data["State"]["Status"],
        "exit_code": data["State"]["ExitCode"],
        "started_at": data["State"]["StartedAt"],
        "labels": dict(c.labels),
    }
