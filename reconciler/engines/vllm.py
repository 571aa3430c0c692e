"""vLLM, two ways across Sparks: Ray (head + workers) or native multiprocessing (--nnodes/--headless).

Ray is how eugr's spark-vllm-docker and NVIDIA's Spark playbook started:
the head runs `ray start --head` and then `vllm serve ...
--distributed-executor-backend ray`; every other rank only runs `ray start
--address HEAD:PORT --block` and lends its GPU to the head's placement
group. So the head starts first, the workers join it.

Native multi-node (vLLM docs, "Running vLLM with MultiProcessing") runs
`vllm serve` on every rank with `--nnodes N --node-rank R --master-addr
HEAD --master-port P`; ranks above 0 add `--headless` (no API server).
They rendezvous among themselves, so all ranks start together.

Spark specifics, as eugr's launcher sets them: each rank announces its own
address (VLLM_HOST_IP, `ray start --node-ip-address`); Ray's object store
is capped at 1 GiB and its memory monitor is off, because on GB10's unified
memory both would otherwise take or police memory the GPU budget counts
on; Ray's transports (TP_SOCKET_IFNAME, UCX_NET_DEVICES) use the cabled
interface like NCCL and GLOO.

The head of a Ray lane runs two programs, so its command is a fixed
`/bin/sh -c` script that never contains a lane field: the Ray port and the
host address arrive as positional parameters and `vllm serve` with all its
flags as `"$@"`, each one its own argv item.
"""

from __future__ import annotations

from reconciler.engines.base import BIND_ALL, RankContext, all_at_once, seal
from reconciler.facts.container import ContainerSpec
from reconciler.spec import Lane

RAY_OBJECT_STORE_BYTES = "1073741824"
RAY_HEAD_SCRIPT = (
    'ray start --head --port="$1" --node-ip-address="$2" '
    f"--object-store-memory={RAY_OBJECT_STORE_BYTES} --include-dashboard=false --disable-usage-stats "
    '&& shift 2 && exec "$@"'
)
"""A constant: lane fields reach it only as "$1", "$2" and "$@", never as text."""
RAY_HEAD_ARGV0 = "lanes-ray-head"

# Spellings the lane vocabulary shares with other engines that vLLM writes differently.
_KV_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def uses_ray(lane: Lane) -> bool:
    return lane.launcher == "ray" and lane.ranks > 1


def kv_cache_dtype(lane: Lane) -> str | None:
    if lane.kv_cache_dtype == "auto":
        return None
    return _KV_DTYPES.get(lane.kv_cache_dtype, lane.kv_cache_dtype)


def serve_argv(ctx: RankContext) -> list[str]:
    """`vllm serve` and the lane's serving flags, before any multi-node flag and the lane's args."""
    lane = ctx.lane
    argv = [
        "serve",
        ctx.model.path,
        "--served-model-name",
        lane.served_name,
        "--host",
        BIND_ALL,
        "--port",
        str(lane.port),
        "--tensor-parallel-size",
        str(lane.tp),
    ]
    if lane.pp > 1:
        argv += ["--pipeline-parallel-size", str(lane.pp)]
    if lane.ep > 1:
        # vLLM sizes expert parallelism itself (tp x dp); the switch is all it takes.
        argv.append("--enable-expert-parallel")
    if lane.dcp > 1:
        argv += ["--decode-context-parallel-size", str(lane.dcp)]
    argv += ["--max-model-len", str(lane.max_model_len), "--max-num-seqs", str(lane.max_num_seqs)]
    dtype = kv_cache_dtype(lane)
    if dtype is not None:
        argv += ["--kv-cache-dtype", dtype]
    argv += ["--gpu-memory-utilization", str(lane.gpu_memory_utilization)]
    return argv


def _network_env(ctx: RankContext) -> dict[str, str]:
    return {"VLLM_HOST_IP": ctx.address} if ctx.multi_node else {}


def render(ctx: RankContext) -> ContainerSpec:
    if uses_ray(ctx.lane):
        return _render_ray(ctx)
    return _render_native(ctx)


def _render_native(ctx: RankContext) -> ContainerSpec:
    argv = serve_argv(ctx)
    if ctx.multi_node:
        argv += [
            "--nnodes",
            str(ctx.ranks),
            "--node-rank",
            str(ctx.rank),
            "--master-addr",
            ctx.head_address,
            "--master-port",
            str(ctx.dist_port),
        ]
        if not ctx.is_head:
            argv.append("--headless")
    argv += ctx.lane.args
    return seal(ctx, image=ctx.lane.image, entrypoint="vllm", command=argv, engine_env=_network_env(ctx))


def _render_ray(ctx: RankContext) -> ContainerSpec:
    iface = ctx.interface
    env = {
        **_network_env(ctx),
        "TP_SOCKET_IFNAME": iface,
        "UCX_NET_DEVICES": iface,
        "RAY_memory_monitor_refresh_ms": "0",
    }
    if ctx.is_head:
        argv = [
            "-c",
            RAY_HEAD_SCRIPT,
            RAY_HEAD_ARGV0,
            str(ctx.ray_port),
            ctx.address,
            "vllm",
            *serve_argv(ctx),
            "--distributed-executor-backend",
            "ray",
            *ctx.lane.args,
        ]
        return seal(ctx, image=ctx.lane.image, entrypoint="/bin/sh", command=argv, engine_env=env)
    argv = [
        "start",
        "--address",
        f"{ctx.head_address}:{ctx.ray_port}",
        "--node-ip-address",
        ctx.address,
        f"--object-store-memory={RAY_OBJECT_STORE_BYTES}",
        "--disable-usage-stats",
        "--block",
    ]
    return seal(ctx, image=ctx.lane.image, entrypoint="ray", command=argv, engine_env=env)


def start_groups(lane: Lane) -> list[tuple[int, ...]]:
    if uses_ray(lane):
        return [(0,), tuple(range(1, lane.ranks))]
    return all_at_once(lane)
