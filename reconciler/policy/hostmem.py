"""Free memory at engine start, per host: observed when the probe saw it, else the hardware profile's figure.

Both engines size their start from the OS's MemAvailable on GB10 (see
engine_memory.py), and the probe reads that same line of /proc/meminfo
(reconciler/facts/parse.py `parse_meminfo`). An observation stands for what
an engine would see at boot only when nothing lanes manages runs on the
host: a running lane's own memory is missing from MemAvailable, so a busy
host falls back to the profile and the output says why.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from reconciler.facts.observed import ObservedFleet
from reconciler.policy.hardware import HARDWARE_PATH, Capacity
from reconciler.policy.verdict import GIB


@dataclass(frozen=True)
class HostMemory:
    """MemAvailable of one host as a probe read it, with when (epoch seconds, the host's clock)."""

    host: str
    available: int
    observed_at: float | None
    source: str = "probe /proc/meminfo MemAvailable"
    busy: tuple[str, ...] = ()
    """Lanes running on the host when it was probed: then MemAvailable is not what a boot would see."""
    total: int | None = None
    """MemTotal of the same read: a host whose total is not its profile's is not the machine the profile
    describes (a misdeclared profile, a test host), and its MemAvailable says nothing of a GB10's boot."""


PROFILE_TOLERANCE = 0.05
"""How far MemTotal may sit from the profile's total memory: GB10 reports 127,601,452 kB = 121.7 GiB
(policies/hardware.yaml gb10.torch_visible); 5 % leaves room for a kernel that reserves a little more."""


@dataclass(frozen=True)
class BootFree:
    """The free memory a boot on this host would see, and where the figure comes from."""

    bytes: int
    origin: str
    """'observed' or 'profile'."""
    source: str
    observed_at: float | None = None


def boot_free(host: str, capacity: Capacity, observed: Mapping[str, HostMemory]) -> BootFree:
    seen = observed.get(host)
    unlike = seen is not None and seen.total is not None and not _like(seen.total, capacity.torch_visible)
    if seen is not None and not seen.busy and not unlike:
        when = (
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seen.observed_at))
            if seen.observed_at is not None
            else "time unknown"
        )
        return BootFree(
            bytes=seen.available,
            origin="observed",
            source=f"{seen.source} on {host} at {when}",
            observed_at=seen.observed_at,
        )
    why = ""
    if seen is not None and unlike and seen.total is not None:
        why = (
            f"; {host}'s observed MemTotal {seen.total / GIB:.1f} GiB is not the {capacity.profile} profile's "
            f"{capacity.torch_visible / GIB:.1f} GiB, so its MemAvailable does not stand for a {capacity.profile} boot"
        )
    elif seen is not None:
        why = (
            f"; {host}'s observed {seen.available / GIB:.1f} GiB MemAvailable is not a boot's view while "
            f"{', '.join(seen.busy)} runs there"
        )
    return BootFree(
        bytes=capacity.boot_free,
        origin="profile",
        source=f"{HARDWARE_PATH} {capacity.profile}.boot_free ({capacity.boot_free / GIB:.1f} GiB){why}",
    )


def from_observation(fleet: ObservedFleet) -> dict[str, HostMemory]:
    """MemAvailable of every reachable host, marked busy where a managed container runs."""
    out: dict[str, HostMemory] = {}
    for seen in fleet:
        if not seen.reachable or seen.memory is None:
            continue
        busy = sorted({c.lane or c.name for c in seen.containers if c.managed and c.running})
        out[seen.host] = HostMemory(
            host=seen.host,
            available=seen.memory.available_bytes,
            observed_at=seen.probed_at,
            busy=tuple(busy),
            total=seen.memory.total_bytes,
        )
    return out


def _like(total: int, profile_total: int) -> bool:
    return abs(total - profile_total) <= PROFILE_TOLERANCE * profile_total
