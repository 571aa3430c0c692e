"""Hardware profiles from `policies/hardware.yaml`, turned into bytes once.

The figures in the file carry units and sources for people; the rules need
bytes and fractions. Converting them here, with an `InputError` naming the
field for a unit nobody knows, keeps every rule free of unit handling.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from reconciler.errors import InputError
from reconciler.spec.policyfiles import Figure, HardwareFile

HARDWARE_PATH = "policies/hardware.yaml"

BYTE_UNITS: Mapping[str, int] = {
    "b": 1,
    "bytes": 1,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
FRACTION_UNITS = ("fraction", "ratio")


@dataclass(frozen=True)
class Capacity:
    """One profile's figures: bytes, and the boot cap as a fraction.

    What an engine's budget is a fraction of depends on the engine (engine_memory.py); budget.py does that.
    """

    profile: str
    memory_total: int
    torch_visible: int
    boot_free: int
    max_boot_utilization: float

    @property
    def boot_cap(self) -> int:
        return int(self.max_boot_utilization * self.torch_visible)


def _bytes(figure: Figure, where: str, path: str) -> int:
    unit = figure.unit.strip().lower()
    if unit not in BYTE_UNITS:
        raise InputError(
            f"unknown unit '{figure.unit}' (use one of B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)",
            file=path,
            field=f"{where}.unit",
        )
    if figure.value <= 0:
        raise InputError("must be positive", file=path, field=f"{where}.value")
    return int(figure.value * BYTE_UNITS[unit])


def _fraction(figure: Figure, where: str, path: str) -> float:
    if figure.unit.strip().lower() not in FRACTION_UNITS:
        raise InputError(f"unit must be 'fraction' (got '{figure.unit}')", file=path, field=f"{where}.unit")
    if not 0 < figure.value <= 1:
        raise InputError("must be in (0, 1]", file=path, field=f"{where}.value")
    return float(figure.value)


def capacities(hardware: HardwareFile, *, path: str = HARDWARE_PATH) -> dict[str, Capacity]:
    out: dict[str, Capacity] = {}
    for name, profile in hardware.profiles.items():
        base = f"profiles.{name}"
        out[name] = Capacity(
            profile=name,
            memory_total=_bytes(profile.memory_total, f"{base}.memory_total", path),
            torch_visible=_bytes(profile.torch_visible, f"{base}.torch_visible", path),
            boot_free=_bytes(profile.boot_free, f"{base}.boot_free", path),
            max_boot_utilization=_fraction(profile.max_boot_utilization, f"{base}.max_boot_utilization", path),
        )
    return out
