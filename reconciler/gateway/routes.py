"""Which workers the gateway should route each served model name to: derived state, never stored.

A lane is a route for its model when it is healthy at its wanted spec: its record says `healthy` (every rank
runs the desired spec and the engine answered when last asked), it should run, no transaction has touched its
ranks, and the spec that last passed its gate is the spec that serves. The worker URL is where that gate
passed (the head host's address and the port the gate reached), not what the lane file says now: a lane whose
file moved to other hosts keeps its route on the hosts that answer until its new spec passes its own gate.
"""

from __future__ import annotations

from collections.abc import Mapping

from reconciler.lane import LaneHealth, LaneState
from reconciler.spec.fleet import FleetDefaults, Host

Routes = Mapping[str, frozenset[str]]
"""Served model name -> the worker URLs (http://address:port) the gateway should send it to."""


def routable(state: LaneState) -> bool:
    """Whether the lane serves its wanted spec and answered its gate: traffic may go to it."""
    healthy = state.healthy
    return (
        state.health is LaneHealth.HEALTHY
        and state.wanted.desired == "running"
        and (state.transaction is None or not state.transaction.touched)
        and healthy is not None
        and healthy.gate is not None
        and state.serving is not None
        and healthy.fingerprint == state.serving
    )


def worker_url(address: str, port: int) -> str:
    """The URL SMG registers for an engine: an IPv6 address is bracketed, as in any URL."""
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}"


def desired_routes(
    fleet: FleetDefaults, hosts: Mapping[str, Host], states: Mapping[str, LaneState]
) -> dict[str, frozenset[str]]:
    """Every served model name of `fleet.gateway`, with the URLs of its routable lanes (empty: none is).

    A model with no routable lane is still listed, with no worker: the reconcile step then takes every
    worker of that name out, rather than leave one that no longer serves the wanted spec.
    """
    gateway = fleet.gateway
    if gateway is None:
        return {}
    out: dict[str, frozenset[str]] = {}
    for model, lanes in gateway.models.items():
        urls: set[str] = set()
        for lane in lanes:
            state = states.get(lane)
            if state is None or not routable(state) or state.healthy is None or state.healthy.gate is None:
                continue
            gate = state.healthy.gate
            if gate.served_model != model:
                continue  # the engine that passed answers another name: the gateway's requests would be refused
            host = hosts.get(gate.host)
            if host is None:
                continue  # a host gone from the state: its address is unknown
            urls.add(worker_url(host.address, gate.port))
        out[model] = frozenset(urls)
    return out
