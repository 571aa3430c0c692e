"""Which CUDA an image asks of the host's driver, and whether a host's driver gives it.

NVIDIA's CUDA images carry the requirement in their environment,
`NVIDIA_REQUIRE_CUDA="cuda>=13.0 brand=..."` (nvidia/cuda Dockerfiles), and
the NVIDIA container runtime's hook refuses to start such a container on a
driver that supports less ("nvidia-container-cli: requirement error:
unsatisfied condition: cuda>=13.0, please update your driver to a newer
version, or use an earlier cuda container"). lanes reads it right after the
pull and compares it with the CUDA version the host's driver reports
(nvidia-smi's header, `facts.hostinfo`), before any rank is stopped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REQUIRE_VAR = "NVIDIA_REQUIRE_CUDA"
DISABLE_VAR = "NVIDIA_DISABLE_REQUIRE"
_CUDA_GE = re.compile(r"(?:^|\s)cuda>=([0-9]+(?:\.[0-9]+)*)")


def required_cuda(env: Iterable[str]) -> str | None:
    """The lowest CUDA the image's NVIDIA_REQUIRE_CUDA asks for; None without one (or when disabled)."""
    values = dict(pair.split("=", 1) for pair in env if "=" in pair)
    if values.get(DISABLE_VAR, "").lower() in {"1", "true", "yes"}:
        return None  # the runtime skips the check too
    found = _CUDA_GE.search(values.get(REQUIRE_VAR, ""))
    return found.group(1) if found else None


def _parts(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def driver_gives(driver_cuda: str, needed: str) -> bool:
    return _parts(driver_cuda) >= _parts(needed)
