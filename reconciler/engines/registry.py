"""Engine kind -> renderer, and the entry points the planner calls: one rank, a whole lane, start order.

Adding an engine is a module with `render(ctx)` (and `start_groups(lane)`
when its ranks must not all start at once) plus one line here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from reconciler.engines import flare, generic, sglang, vllm
from reconciler.engines.base import RankContext, all_at_once
from reconciler.engines.fabric import lane_network
from reconciler.engines.ports import LanePorts
from reconciler.errors import InputError
from reconciler.facts.container import ContainerSpec
from reconciler.spec import FleetDefaults, Host, Lane, ModelSpec

Renderer = Callable[[RankContext], ContainerSpec]
StartOrder = Callable[[Lane], list[tuple[int, ...]]]

RENDERERS: Mapping[str, Renderer] = MappingProxyType(
    {
        "sglang": sglang.render,
        "vllm": vllm.render,
        "flare": flare.render,
        "generic": generic.render,
    }
)
START_ORDERS: Mapping[str, StartOrder] = MappingProxyType({"vllm": vllm.start_groups})


def render_rank(ctx: RankContext) -> ContainerSpec:
    """The container spec of one rank."""
    lane = ctx.lane
    if not 0 <= ctx.rank < lane.ranks:
        raise ValueError(f"lane '{lane.name}' has ranks 0..{lane.ranks - 1}, not {ctx.rank}")
    if ctx.host.name != lane.hosts[ctx.rank]:
        raise ValueError(f"rank {ctx.rank} of lane '{lane.name}' runs on {lane.hosts[ctx.rank]}, not {ctx.host.name}")
    if ctx.model.name != lane.model:
        raise ValueError(f"lane '{lane.name}' serves model '{lane.model}', not '{ctx.model.name}'")
    return RENDERERS[lane.engine](ctx)


def render_lane(
    lane: Lane,
    model: ModelSpec,
    fleet: FleetDefaults,
    hosts: Mapping[str, Host],
    commit: str,
) -> list[ContainerSpec]:
    """Specs of all ranks, in rank order."""
    missing = [name for name in lane.hosts if name not in hosts]
    if missing:
        raise InputError(
            f"lane '{lane.name}': host(s) {', '.join(missing)} not defined in the state's hosts",
            field="hosts",
        )
    ports = LanePorts.of(lane)
    network = lane_network(lane.name, [hosts[name] for name in lane.hosts])
    return [
        render_rank(
            RankContext(
                lane=lane,
                model=model,
                fleet=fleet,
                rank=rank,
                host=hosts[name],
                commit=commit,
                ports=ports,
                network=network,
            )
        )
        for rank, name in enumerate(lane.hosts)
    ]


def start_groups(lane: Lane) -> list[tuple[int, ...]]:
    """Ranks started together, group after group: e.g. a Ray head before its workers."""
    return START_ORDERS.get(lane.engine, all_at_once)(lane)
