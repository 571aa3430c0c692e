"""Simulated Sparks: SSH servers, a docker-compatible runtime and an engine stand-in, on one machine.

No GB10 is reachable from tests or the demo, so `SimFleet` stands up hosts
that speak what a Spark speaks (SSH with pinned keys, `docker ...`, the
`reconciler.facts` commands) with one real stand-in process per running
container. The names below are loaded lazily: the stand-in
(`python -m reconciler.sim.standin`) imports this package too, and must
start fast with the stdlib alone, also inside containers without asyncssh.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reconciler.lazynames import names_from

if TYPE_CHECKING:
    from reconciler.sim.registry import SimImage, SimRegistry
    from reconciler.sim.runtime import SimContainerRuntime
    from reconciler.sim.sshd import SimFleet, SimHost, SimTarget

__all__ = ["SimContainerRuntime", "SimFleet", "SimHost", "SimImage", "SimRegistry", "SimTarget"]

_HOME = {
    "SimContainerRuntime": "reconciler.sim.runtime",
    "SimFleet": "reconciler.sim.sshd",
    "SimHost": "reconciler.sim.sshd",
    "SimImage": "reconciler.sim.registry",
    "SimRegistry": "reconciler.sim.registry",
    "SimTarget": "reconciler.sim.sshd",
}


__getattr__ = names_from(__name__, _HOME)
