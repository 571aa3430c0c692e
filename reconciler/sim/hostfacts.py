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
import posixpath
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reconciler.facts.commands import ENVFILE_REFUSED_EXIT, EnvFileRequest, LeaseRequest, ProbeRequest
from reconciler.facts.lease_script import LEASE_CONFLICT_EXIT
from reconciler.facts.probe_digest import VOLATILE_KEYS, fact_digest
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
    """A regular file on a simulated host (an env file, or one a test placed), with its mode."""

    content: str
    mode: int


@dataclass(frozen=True)
class SimLink:
    """A symlink on a simulated host, at a file's or a directory's path."""

    target: str
    ours: bool = True
    """Owned by the user lanes logs in as (else by another user)."""


@dataclass(frozen=True)
class SimDir:
    """A directory's owner and mode, where a test set them (any other directory is ours, 0700)."""

    ours: bool = True
    mode: int = 0o700


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
        """Regular files by path: what the env-file command wrote, and files a test placed."""
        self.links: dict[str, SimLink] = {}
        """Symlinks by path (a file's or a directory's); only the env-file command and docker's --env-file look."""
        self.dirs: dict[str, SimDir] = {}
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

    def probe_meminfo(self, running: int) -> str:
        """What the probe sends of /proc/meminfo: the lines the control node reads (`probe_script.MEMINFO_KEYS`)."""
        keep = ("MemTotal:", "MemFree:", "MemAvailable:", "Cached:")
        return "".join(line for line in self.meminfo(running).splitlines(keepends=True) if line.startswith(keep))

    def drop_caches(self) -> None:
        self.drop_caches_count += 1
        self.page_cache = min(self.page_cache, _CACHE_FLOOR_KB * KIB)

    def envfile(self, request: EnvFileRequest, stdin: str) -> tuple[int, str]:
        """The env-file script's semantics (`facts/envfile_script.py`), in memory: (exit status, stderr).

        write: a new 0600 file renamed over the path (a symlink there is replaced, its target untouched;
        a stale or placed temporary name is cleared first); remove: the path and its temporary name go.
        Both refuse a directory that is a symlink owned by another user, or that resolves to a directory
        not ours or writable by group or others; a symlink of ours is followed.
        """
        for path in request.paths:
            directory, name = posixpath.split(path)
            real_dir, refused = self._envfile_dir(directory)
            if refused:
                return ENVFILE_REFUSED_EXIT, f"lanes-envfile: refused: {refused}\n"
            real, tmp = posixpath.join(real_dir, name), posixpath.join(real_dir, f".{name}.tmp")
            for gone in (tmp, real):
                self.envfiles.pop(gone, None)  # unlink: a symlink goes, never its target
                self.links.pop(gone, None)
            if request.action == "write":
                self.envfiles[real] = EnvFile(content=stdin, mode=0o600)
        return 0, ""

    def _envfile_dir(self, directory: str) -> tuple[str, str | None]:
        link = self.links.get(directory)
        if link is not None and not link.ours:
            return directory, f"{directory} is a symlink owned by another user"
        real = link.target if link is not None else directory
        d = self.dirs.get(real, SimDir())
        if not d.ours:
            return real, f"{real} is owned by another user"
        if d.mode & 0o022:
            return real, f"{real} is writable by group or others (mode {d.mode:04o})"
        return real, None

    def read_envfile(self, path: str) -> str | None:
        """What `docker run --env-file PATH` reads: symlinks followed, as open(2) does."""
        directory, name = posixpath.split(path)
        link = self.links.get(directory)
        path = posixpath.join(link.target, name) if link is not None else path
        for _ in range(8):
            file_link = self.links.get(path)
            if file_link is None:
                break
            path = file_link.target
        written = self.envfiles.get(path)
        return written.content if written else None

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
            "meminfo": self.probe_meminfo(running),
            "disk": disk,
            "models": models,
            "lease": self.leases.get(request.lease_file),
            "host": self.info.section(disks, errors),
            "errors": errors,
        }
        digest = fact_digest(out)
        if request.known is not None and request.known == digest:
            # As the probe program answers a host whose facts match the digest the control node holds.
            short = {"probe_version": PROBE_VERSION, "digest": digest, "unchanged": True, "disks": disks}
            short.update((k, out[k]) for k in VOLATILE_KEYS)
            return json.dumps(short, sort_keys=True) + "\n"
        out["digest"] = digest
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
    """Each simulated host's data plane as its host file says (interface, address, RoCE device), and the
    address the file gives it, so the simulator agrees with the fleet state until a test changes one side."""
    for name, host in desired.hosts.items():
        if name in fleet.names:
            ports = [(p.interface, p.address, p.hca) for p in host.data_plane]
            fleet.runtime(name).facts.info.set_data_plane(ports)
            fleet.control_addresses[name] = host.address
