"""The non-container side of a simulated Spark: memory, disk, model files, the lease, env files, host facts.

The probe, lease, env-file and drop-caches commands (`reconciler.facts`)
are answered here with the same semantics the real scripts have on a host,
from in-memory state a test can set: a GB10-like /proc/meminfo whose
available memory shrinks with every running container, a disk, model paths
with sizes, the lease, env files with their mode, and the host facts of a
DGX Spark (`sparkinfo`: OS, driver, CX-7 links and RDMA, disk space). Nothing touches the
machine's real files, so simulated hosts stay apart and secrets written to
them never reach the disk.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reconciler.facts.commands import LeaseRequest, ProbeRequest
from reconciler.facts.lease_script import LEASE_CONFLICT_EXIT
from reconciler.facts.probe_script import PROBE_VERSION
from reconciler.sim.sparkinfo import SimSparkInfo

if TYPE_CHECKING:
    from reconciler.sim.sshd import SimFleet
    from reconciler.spec.load import DesiredState

KIB = 1024
GIB = 1024**3
GB10_MEMTOTAL_KB = 124_781_532  # what a DGX Spark's kernel reports of its 128 GB (about 119 GiB)
_OS_USED_KB = 4_200_000  # kernel, sshd, docker daemon at rest
_CACHE_FLOOR_KB = 180_000  # what drop_caches cannot drop


@dataclass(frozen=True)
class EnvFile:
    """An env file written on a simulated host, with the mode it was created with."""

    content: str
    mode: int


class SimHostFacts:
    """Memory, disk, models, lease and env files of one simulated host."""

    def __init__(
        self,
        *,
        memory_per_container: int = 10 * GIB,
        page_cache: int = 12 * GIB,
        disk_total: int = 3840 * 10**9,
        disk_free: int = 1800 * 10**9,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.memory_total_kb = GB10_MEMTOTAL_KB
        self.memory_per_container = memory_per_container  # bytes each running container takes
        self.page_cache = page_cache  # bytes; on GB10 it counts as used until dropped
        self.disk: tuple[int, int] | None = (disk_total, disk_free)  # None: the disk path is missing
        self.models: dict[str, int] = {}
        self.leases: dict[str, dict[str, Any]] = {}
        self.envfiles: dict[str, EnvFile] = {}
        self.drop_caches_count = 0
        self.clock = clock
        self.info = SimSparkInfo.gb10()
        self.disk_by_path: dict[str, tuple[int, int]] = {}
        """(total, free) of the filesystem under one path, where it differs from `disk` (a full model disk)."""

    def add_model_path(self, path: str, size: int) -> None:
        self.models[path] = size

    def meminfo(self, running: int) -> str:
        """A /proc/meminfo text shaped like a GB10's, for `running` containers."""
        total = self.memory_total_kb
        cached = self.page_cache // KIB
        used = _OS_USED_KB + running * (self.memory_per_container // KIB)
        free = max(total - used - cached, 0)
        available = max(total - used, 0)
        rows = [
            ("MemTotal", total),
            ("MemFree", free),
            ("MemAvailable", available),
            ("Buffers", 45_872),
            ("Cached", cached),
            ("SwapCached", 0),
            ("Active", min(used, total)),
            ("Inactive", cached),
            ("SwapTotal", 0),
            ("SwapFree", 0),
            ("Shmem", 36_528),
            ("Hugepagesize", 2048),
        ]
        return "".join(f"{key + ':':<16}{value:>10} kB\n" for key, value in rows)

    def drop_caches(self) -> None:
        self.drop_caches_count += 1
        self.page_cache = min(self.page_cache, _CACHE_FLOOR_KB * KIB)

    def write_envfile(self, path: str, content: str) -> None:
        # umask 077 in the real command: the file is created 0600.
        self.envfiles[path] = EnvFile(content=content, mode=0o600)

    def probe(
        self,
        request: ProbeRequest,
        *,
        hostname: str,
        containers: list[dict[str, Any]] | None,
        unmanaged: list[dict[str, Any]],
        listening: list[int],
        running: int,
    ) -> str:
        """The JSON the probe script would print on this host (containers None: no docker)."""
        errors: list[str] = []
        if containers is None:
            errors.append("docker: not found")
        disk = None
        if self.disk is None:
            errors.append(f"disk {request.disk_path}: No such file or directory")
        else:
            disk = {"path": request.disk_path, "total": self.disk[0], "free": self.disk[1]}
        models = {p: {"exists": p in self.models, "bytes": self.models.get(p, 0)} for p in request.model_paths}
        disks = {}
        for path in dict.fromkeys([*request.model_paths, request.disk_path]):
            total_free = self.disk_by_path.get(path, self.disk)
            if total_free is not None:  # the real probe measures the nearest existing parent; nothing here
                disks[path] = {"measured_at": path, "total": total_free[0], "free": total_free[1]}
        out = {
            "probe_version": PROBE_VERSION,
            "hostname": hostname,
            "time": self.clock(),
            "containers": containers or [],
            "unmanaged": unmanaged,
            "listening": listening,
            "meminfo": self.meminfo(running),
            "disk": disk,
            "models": models,
            "lease": self.leases.get(request.lease_file),
            "host": self.info.section(disks, errors),
            "errors": errors,
        }
        return json.dumps(out, sort_keys=True) + "\n"

    def lease(self, request: LeaseRequest) -> tuple[int, str]:
        """The lease script's semantics, in memory (same exit codes and JSON)."""
        now = self.clock()
        lease = self.leases.get(request.lease_file)
        live = lease is not None and float(lease.get("expires", 0)) > now
        mine = lease is not None and lease.get("owner") == request.owner

        def reply(ok: bool, shown: dict[str, Any] | None, status: int) -> tuple[int, str]:
            return status, json.dumps({"ok": ok, "lease": shown}, sort_keys=True) + "\n"

        if live and not mine:
            return reply(False, lease, LEASE_CONFLICT_EXIT)
        if request.action == "acquire":
            acquired = float(lease["acquired"]) if (lease is not None and live and mine) else now
            new = {"owner": request.owner, "acquired": acquired, "expires": now + request.ttl_s}
            self.leases[request.lease_file] = new
            return reply(True, new, 0)
        if mine:
            del self.leases[request.lease_file]
        return reply(True, None, 0)


def apply_state(fleet: SimFleet, desired: DesiredState) -> None:
    """Each simulated host's data plane as its host file says (interface, address, RoCE device), so the
    simulator agrees with the fleet state until a test changes one side."""
    for name, host in desired.hosts.items():
        if name in fleet.names:
            ports = [(p.interface, p.address, p.hca) for p in host.data_plane]
            fleet.runtime(name).facts.info.set_data_plane(ports)
