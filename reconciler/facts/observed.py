"""What the fleet looks like right now, as frozen values the planner can diff.

The planner compares desired lanes against these values and nothing else,
so everything it needs from a host (managed containers and their labels,
memory, disk, model presence, the lease) is here, already parsed and typed.
A host that could not be probed is still an `ObservedHost`, marked
unreachable with the reason: the planner must treat "unknown" differently
from "nothing running".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from reconciler.facts.hostinfo import HostInfo
from reconciler.facts.labels import LABEL_COMMIT, LABEL_LANE, LABEL_MANAGED, LABEL_RANK, LABEL_SPEC, MANAGED_VALUE


@dataclass(frozen=True, slots=True)
class ObservedContainer:
    """A container lanes started, as `docker inspect` describes it."""

    name: str
    id: str
    image: str  # the reference it was run from (repo@sha256:...)
    image_id: str  # the local image id (config digest)
    state: str  # docker's State.Status: created, running, exited, ...
    exit_code: int | None
    labels: Mapping[str, str]
    started_at: str | None = None

    @property
    def managed(self) -> bool:
        return self.labels.get(LABEL_MANAGED) == MANAGED_VALUE

    @property
    def lane(self) -> str | None:
        return self.labels.get(LABEL_LANE)

    @property
    def rank(self) -> int | None:
        raw = self.labels.get(LABEL_RANK)
        try:
            return int(raw) if raw is not None else None
        except ValueError:
            return None

    @property
    def spec_hash(self) -> str | None:
        return self.labels.get(LABEL_SPEC)

    @property
    def commit(self) -> str | None:
        return self.labels.get(LABEL_COMMIT)

    @property
    def running(self) -> bool:
        return self.state == "running"


@dataclass(frozen=True, slots=True)
class UnmanagedContainer:
    """A container lanes did not start: it may still hold a lane's port or memory."""

    name: str
    image: str
    state: str


@dataclass(frozen=True, slots=True)
class Lease:
    """Who holds a host, until when (epoch seconds, the host's clock)."""

    owner: str
    acquired: float
    expires: float

    def expired(self, now: float) -> bool:
        return self.expires <= now

    def held_by_other(self, owner: str, now: float) -> bool:
        return self.owner != owner and not self.expired(now)


@dataclass(frozen=True, slots=True)
class LeaseOutcome:
    """The answer of a lease command: whether it worked, and the lease it saw or wrote."""

    ok: bool
    lease: Lease | None


@dataclass(frozen=True, slots=True)
class ModelPresence:
    """Whether a model path exists on a host and how many bytes are under it."""

    exists: bool
    bytes: int


@dataclass(frozen=True, slots=True)
class Memory:
    """Host memory from /proc/meminfo (nvidia-smi reports N/A on GB10).

    `cached_bytes` is the page cache: MemAvailable counts it as free, but on
    GB10's unified memory CUDA allocations do not get it back until it is
    dropped, which is why it is kept apart.
    """

    total_bytes: int
    available_bytes: int
    cached_bytes: int
    free_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class ObservedHost:
    """Everything one probe said about one host (or why there is no probe)."""

    host: str
    reachable: bool
    error: str | None
    containers: tuple[ObservedContainer, ...]
    unmanaged: tuple[UnmanagedContainer, ...]
    listening: frozenset[int]
    memory: Memory | None
    disk_free: int | None
    disk_total: int | None
    models: Mapping[str, ModelPresence]
    lease: Lease | None
    probe_errors: tuple[str, ...]
    hostname: str | None = None
    probed_at: float | None = None  # the host's clock: compare leases against this
    info: HostInfo | None = None  # OS, driver, links, RDMA, disk space: None when not probed (unreachable)

    @classmethod
    def unreachable(cls, host: str, reason: str) -> ObservedHost:
        return cls(
            host=host,
            reachable=False,
            error=reason,
            containers=(),
            unmanaged=(),
            listening=frozenset(),
            memory=None,
            disk_free=None,
            disk_total=None,
            models={},
            lease=None,
            probe_errors=(),
        )

    def container(self, name: str) -> ObservedContainer | None:
        return next((c for c in self.containers if c.name == name), None)

    def lane_containers(self, lane: str) -> tuple[ObservedContainer, ...]:
        return tuple(c for c in self.containers if c.lane == lane)


@dataclass(frozen=True)
class ObservedFleet:
    """The observed hosts of one cycle, by host name."""

    hosts: Mapping[str, ObservedHost] = field(default_factory=dict)
    reused: frozenset[str] = frozenset()
    """Hosts not probed in this cycle: their last observation, within a bounded age (a commit's reaction)."""

    def __iter__(self) -> Iterator[ObservedHost]:
        return iter(self.hosts.values())

    def host(self, name: str) -> ObservedHost | None:
        return self.hosts.get(name)

    def containers_of_lane(self, lane: str) -> list[tuple[str, ObservedContainer]]:
        """Every container of `lane` on any host, ordered by rank then host."""
        return list(self._by_lane().get(lane, ()))

    def _by_lane(self) -> dict[str, list[tuple[str, ObservedContainer]]]:
        # Built once per observation: the planner asks for every lane, and scanning every host each time
        # made planning a 1,000-host fleet grow with lanes x containers.
        index: dict[str, list[tuple[str, ObservedContainer]]] | None = self.__dict__.get("_lane_index")
        if index is None:
            index = {}
            for h in self.hosts.values():
                for c in h.containers:
                    if c.lane:
                        index.setdefault(c.lane, []).append((h.host, c))
            for found in index.values():
                found.sort(key=lambda hc: (hc[1].rank if hc[1].rank is not None else -1, hc[0]))
            object.__setattr__(self, "_lane_index", index)
        return index

    def host_info(self) -> dict[str, HostInfo]:
        """What the probe read of each host it reached (its OS, links, RDMA devices, disks)."""
        return {name: h.info for name, h in self.hosts.items() if h.reachable and h.info is not None}

    def lanes(self) -> frozenset[str]:
        """Names of every lane that has a container somewhere (to find orphans)."""
        return frozenset(c.lane for h in self.hosts.values() for c in h.containers if c.lane)

    def unreachable(self) -> tuple[str, ...]:
        return tuple(sorted(name for name, h in self.hosts.items() if not h.reachable))
