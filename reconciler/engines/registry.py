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
from reconciler.facts.hostinfo import HostInfo
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
"""Engines whose ranks must not all start at once. Only a vLLM Ray lane is one: its workers' `ray start
--address` joins a GCS that the head's `ray start --head` opens, and the head waits for them.

SGLang (`--dist-init-addr HEAD:PORT`) and native multi-node vLLM (`--master-addr/--master-port`, workers
`--headless`) start all ranks together, on purpose. Both rendezvous through torch.distributed's TCP store,
which rank 0 hosts: sglang 0.5.19 `srt/distributed/bootstrap.py` `_resolve_dist_init_method` turns
`--dist-init-addr` into `tcp://HEAD:PORT` for `torch.distributed.init_process_group` (parallel_state.py
`init_distributed_environment`); vllm 0.32.0 `distributed/parallel_state.py` does the same with
master_addr:master_port when nnodes > 1. torch's tcp:// rendezvous (torch 2.13 `distributed/rendezvous.py`
`_create_c10d_store`) makes rank 0 the store's server and every other rank a client that keeps retrying
its connect until the process group's timeout (measured with torch 2.13: a rank started 5 s before rank 0
joined it; with no rank 0 it gave up after its timeout), and rank 0 waits for the others in turn. So
either rank may come first: a worker before its head waits, as a head before its workers does.
(SGLang's DP-attention handshake is the same shape: `data_parallel_controller.py`
`_receive_ports_as_client` waits up to 10 min for node 0.) The launchers disagree with each other, which
is consistent with the order not mattering: aidendle94/sparkrun-recipes `launch-sgl-dsv41.sh` starts
ranks 3, 2, 1, 0 one `docker run -d` after another, while spark-arena/sparkrun
`runtimes/_cluster_ops.py` `run_native_cluster` starts the head's serve first, waits for its init port,
then the workers in parallel."""


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
    host_info: Mapping[str, HostInfo] | None = None,
) -> list[ContainerSpec]:
    """Specs of all ranks, in rank order; `host_info`: what this cycle's probe read of each host it reached."""
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
                info=(host_info or {}).get(name),
            )
        )
        for rank, name in enumerate(lane.hosts)
    ]


def start_groups(lane: Lane) -> list[tuple[int, ...]]:
    """Ranks started together, group after group: e.g. a Ray head before its workers."""
    return START_ORDERS.get(lane.engine, all_at_once)(lane)
