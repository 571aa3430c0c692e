"""Which workers the gateway should route each served model name to: derived state, never stored.

A lane is a route for its model where its state says (`reconciler.lane.LaneState.route`): the spec that last
passed its gate, while it serves and nothing in flight touched its ranks, or a blue/green change's new spec
while it is watched. The worker URL is where that gate passed (the head host's address and the port the gate
reached), not what the lane file says now: a lane whose file moved to other hosts keeps its route on the hosts
that answer until its new spec passes its own gate.
"""

from __future__ import annotations

from collections.abc import Mapping

from reconciler.lane import LaneState, TxKind
from reconciler.spec.fleet import FleetDefaults, Host

Routes = Mapping[str, frozenset[str]]
"""Served model name -> the worker URLs (http://address:port) the gateway should send it to."""


def routable(state: LaneState) -> bool:
    """Whether traffic may go to the lane now (`LaneState.route`, the lane machine's word on it)."""
    return state.route() is not None


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
            gate = state.route() if state is not None else None
            if gate is None:
                continue
            if gate.served_model != model:
                continue  # the engine that passed answers another name: the gateway's requests would be refused
            host = hosts.get(gate.host)
            if host is None:
                continue  # a host gone from the state: its address is unknown
            urls.add(worker_url(host.address, gate.port))
        out[model] = frozenset(urls)
    return out


BRINGING_BACK = frozenset({TxKind.DEPLOY, TxKind.RESTORE, TxKind.VERIFY})


def away_models(
    fleet: FleetDefaults, states: Mapping[str, LaneState], last_starts: Mapping[str, float], now: float
) -> dict[str, float]:
    """Served model names whose every lane routes nowhere while one of them is being brought back (a change in
    place, a restore): each with when it is expected back (epoch s), for the holding answer's Retry-After.

    When is the transaction's start plus the lane's last measured start, else its gate's deadline, else a
    minute from now. A model none of whose lanes is in flight is not away but gone (404, as before)."""
    gateway = fleet.gateway
    if gateway is None:
        return {}
    out: dict[str, float] = {}
    for model, lanes in gateway.models.items():
        found = [states[name] for name in lanes if name in states]
        if any(state.route() is not None for state in found):
            continue
        backs = []
        for name in lanes:
            state = states.get(name)
            op = state.transaction if state is not None else None
            if state is None or op is None or op.kind not in BRINGING_BACK or state.wanted.desired != "running":
                continue
            took = last_starts.get(name)
            backs.append(op.started + took if took is not None else op.deadline if op.deadline else now + 60.0)
        if backs:
            out[model] = max(min(backs), now)
    return out
