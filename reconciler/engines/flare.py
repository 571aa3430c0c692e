"""FLARE (NVIDIA/flare-local-inference): a Rust runtime serving prepared CUDA graphs.

No public documentation of its command line was found when this was
written, so the argv is a best guess and must be checked against the
project's README: `flare serve --model PATH --served-model-name NAME
--host 0.0.0.0 --port P --tp N [--pp N] --max-model-len L --max-num-seqs S
--gpu-memory-utilization U [--kv-cache-dtype D]`, and across Sparks `--rank
R --hosts A,B,C,D` (every rank lists all ranks' addresses in rank order;
upstream serves "over hosts cabled as a chain"). Presets and tuning live in
the lane's `args`, which come last and so can override any of the above.

The lane's `dcp` has no known FLARE flag and is not rendered, and an `ep` above 1 is refused;
a lane that needs them says so in its `args`.
"""

from __future__ import annotations

from reconciler.engines.base import BIND_ALL, RankContext, seal
from reconciler.errors import InputError
from reconciler.facts.container import ContainerSpec


def _hosts_flag(ctx: RankContext) -> str:
    peers = ctx.peer_addresses
    if len(peers) != ctx.ranks:
        raise ValueError(f"FLARE needs the addresses of all {ctx.ranks} ranks (RankContext.peer_addresses)")
    for address in peers:
        if "," in address:
            raise InputError(f"lane '{ctx.lane.name}': host address {address!r} contains ','", field="hosts")
    return ",".join(peers)


def render(ctx: RankContext) -> ContainerSpec:
    lane = ctx.lane
    if lane.ep > 1:
        raise InputError(
            f"lane '{lane.name}': FLARE has no expert-parallel flag that lanes knows of, so ep {lane.ep} would "
            "run without expert parallelism; set ep: 1 (and pass FLARE's own option in args)",
            field="ep",
        )
    argv = [
        "serve",
        "--model",
        ctx.model.path,
        "--served-model-name",
        lane.served_name,
        "--host",
        BIND_ALL,
        "--port",
        str(lane.port),
        "--tp",
        str(lane.tp),
    ]
    if lane.pp > 1:
        argv += ["--pp", str(lane.pp)]
    argv += [
        "--max-model-len",
        str(lane.max_model_len),
        "--max-num-seqs",
        str(lane.max_num_seqs),
        "--gpu-memory-utilization",
        str(lane.gpu_memory_utilization),
    ]
    if lane.kv_cache_dtype != "auto":
        argv += ["--kv-cache-dtype", lane.kv_cache_dtype]
    if ctx.multi_node:
        argv += ["--rank", str(ctx.rank), "--hosts", _hosts_flag(ctx)]
    argv += lane.args
    return seal(ctx, image=lane.image, entrypoint="flare", command=argv, engine_env={})
