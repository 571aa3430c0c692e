"""Free disk under each model path of each host, and the model's bytes already there, from a probe.

The probe (`reconciler.facts.probe_script`) measures the filesystem under every model path of the lanes
on a host (statvfs of the path, or of its nearest existing parent when the model is not there yet) and
the bytes of regular files already under the path. The model-disk rule reads those figures; without a
probe (a plain `lanes check`) there are none, and the rule says nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from reconciler.facts.observed import ObservedFleet


@dataclass(frozen=True)
class ModelDisk:
    """One model path on one host, as a probe saw it."""

    host: str
    path: str
    free: int
    """Bytes an unprivileged writer may still use (statvfs f_bavail x f_frsize)."""
    measured_at: str
    """The path statvfs was given: the model path itself, or the nearest parent that exists."""
    present: int | None
    """Bytes of regular files under the path already (None: not reported)."""


ModelDisks = Mapping[tuple[str, str], ModelDisk]
"""(host, model path) -> what the probe saw there."""


def disks_from_observation(fleet: ObservedFleet) -> dict[tuple[str, str], ModelDisk]:
    """Every model path a reachable host reported disk space for."""
    out: dict[tuple[str, str], ModelDisk] = {}
    for seen in fleet:
        if not seen.reachable or seen.info is None:
            continue
        for path, space in seen.info.disks.items():
            presence = seen.models.get(path)
            if presence is None:
                continue  # the HF cache's disk, not a model's
            out[(seen.host, path)] = ModelDisk(
                host=seen.host,
                path=path,
                free=space.free,
                measured_at=space.measured_at,
                present=presence.bytes if presence.exists else 0,
            )
    return out
