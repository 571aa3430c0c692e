"""One SSH round trip per host per cycle: every fact the planner needs.

Probing all hosts in parallel (bounded) with one command each keeps a no-op
resync of a large fleet close to the cost of one round trip; a host that
does not answer becomes an `unreachable` observation with the reason, not an
exception, so its lanes are reported and the others go on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from reconciler.errors import LanesError
from reconciler.facts.commands import probe_argv
from reconciler.facts.observed import ObservedFleet, ObservedHost
from reconciler.facts.parse import parse_probe
from reconciler.spec.load import DesiredState
from reconciler.transport.base import HostTarget, Transport


def lease_file(desired: DesiredState) -> str:
    return f"{desired.fleet.state_dir_on_host.rstrip('/')}/lease.json"


def model_paths_by_host(desired: DesiredState) -> dict[str, list[str]]:
    paths: dict[str, set[str]] = {name: set() for name in desired.hosts}
    for lane in desired.lanes.values():
        model = desired.models.get(lane.model)
        if model is None:
            continue
        for host in lane.hosts:
            if host in paths:
                paths[host].add(model.path)
    return {host: sorted(p) for host, p in paths.items()}


async def probe_host(
    transport: Transport, target: HostTarget, desired: DesiredState, paths: list[str], timeout: float
) -> ObservedHost:
    argv = probe_argv(paths, lease_file(desired), desired.fleet.hf_cache)
    try:
        result = await transport.run(target, argv, timeout=timeout, check=True)
        return parse_probe(target.name, result.stdout)
    except LanesError as exc:
        return ObservedHost.unreachable(target.name, str(exc))


async def observe(
    desired: DesiredState,
    transport: Transport,
    targets: Mapping[str, HostTarget],
    *,
    timeout: float = 30.0,
    concurrency: int = 128,
) -> ObservedFleet:
    paths = model_paths_by_host(desired)
    gate = asyncio.Semaphore(concurrency)

    async def one(name: str) -> ObservedHost:
        async with gate:
            return await probe_host(transport, targets[name], desired, paths.get(name, []), timeout)

    names = sorted(targets)
    hosts = await asyncio.gather(*(one(n) for n in names))
    return ObservedFleet({h.host: h for h in hosts})
