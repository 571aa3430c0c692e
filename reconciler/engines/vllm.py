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

Spark specifics of a Ray lane, and where each comes from:

- each rank announces its own data-plane address, VLLM_HOST_IP and `ray
  start --node-ip-address`: eugr/spark-vllm-docker run-cluster-node.sh
  @ 74c02c3, lines 85 (`export_persist VLLM_HOST_IP`), 109 and 118;
- Ray's memory monitor is off, RAY_memory_monitor_refresh_ms=0: the same
  file, line 102; NVIDIA/dgx-spark-playbooks nvidia/vllm/README.md (the
  head's and workers' `-e` flags); spark-arena/sparkrun
  src/sparkrun/runtimes/vllm_ray.py `get_cluster_env`. The monitor kills
  workers once the node's memory in use passes RAY_memory_usage_threshold,
  0.95 by default (docs.ray.io, "Out-Of-Memory Prevention"), and on GB10
  the GPU's allocations are that memory: a rank at 0.8-0.9 of it plus the
  OS gets there by design;
- Ray's object store is capped at 1 GiB (`--object-store-memory`). This
  figure is lanes' own: none of those launchers passes the flag, so Ray
  reserves its default of 30% of the memory available at start per node
  (docs.ray.io/en/latest/ray-core/scheduling/memory-management.html,
  "Object store memory"), some 36 GB of a Spark, which no memory budget
  here counts; vLLM's tensors move over NCCL, and 1 GiB leaves Ray its
  control objects.

Every port Ray would pick or fix per host is pinned from the lane's port
block (`engines/ports.py`), so two Ray lanes can share a host.

The head of a Ray lane runs three steps, so its command is a fixed
`/bin/sh -c` script that never contains a lane field: start the Ray head,
wait until every rank's node has joined (so `vllm serve` never places its
workers on a half-formed cluster), then exec `vllm serve`. Its parameters
arrive positionally and `vllm serve` with all its flags as `"$@"`, each one
its own argv item.
"""

from __future__ import annotations

import re

from reconciler.engines.base import BIND_ALL, RankContext, all_at_once, seal
from reconciler.engines.flags import kv_spelling
from reconciler.errors import InputError
from reconciler.facts.container import ContainerSpec
from reconciler.spec import Lane

RAY_OBJECT_STORE_BYTES = "1073741824"
"""1 GiB: lanes' own cap on Ray's object store (Ray's default is 30% of memory; see the module's docstring)."""
RAY_JOIN_TIMEOUT_S = 600
"""How long the head waits for the workers' Ray nodes: they start right after it, but pull and start in parallel."""
RAY_NODES_ALIVE = (
    "import sys, time, ray\n"
    "want, deadline = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])\n"
    "ray.init(address='auto', logging_level='ERROR')\n"
    "t0 = time.monotonic()\n"
    "while True:\n"
    "    alive = sum(1 for n in ray.nodes() if n.get('Alive'))\n"
    "    if alive >= want:\n"
    "        took = time.monotonic() - t0\n"
    "        print('lanes: %d of %d Ray nodes joined after %.1f s' % (alive, want, took), flush=True)\n"
    "        break\n"
    "    if time.monotonic() > deadline:\n"
    "        sys.exit('lanes: only %d of %d Ray nodes joined in %s s' % (alive, want, sys.argv[2]))\n"
    "    time.sleep(1)\n"
)
"""Counts live nodes through Ray's own API (`ray.nodes()`), which `ray status` prints from as well."""
RAY_HEAD_SCRIPT = (
    'ray start --head --node-ip-address="$1" '
    f"--object-store-memory={RAY_OBJECT_STORE_BYTES} --include-dashboard=false --disable-usage-stats "
    '"$4" "$5" "$6" "$7" "$8" "$9" "${10}" "${11}" "${12}" "${13}" '
    f'&& python3 -c "$RAY_NODES_ALIVE" "$2" "$3" && shift 13 && exec "$@"'
)
"""A constant: lane fields reach it only as positional parameters, never as text.

$1 the head's address, $2 how many nodes to wait for, $3 for how long, $4..$13 the ten port flags of
`RayPorts.start_flags(head=True)`, then `vllm serve ...` as "$@". The join check arrives in the env."""
RAY_HEAD_ARGV0 = "lanes-ray-head"

# Spellings the lane vocabulary shares with other engines that vLLM writes differently.
# vllm/config/cache.py CacheDType has the rest of the vocabulary as written; which of it a release
# takes is in its flag table (nvfp4_ds_mla is in 0.32.0, not in 0.26.0).
_KV_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


_RAY_JOINED = re.compile(r"lanes: (\d+) of (\d+) Ray nodes joined after ([0-9.]+) s")


def is_ray_head(spec: ContainerSpec) -> bool:
    return spec.entrypoint == "/bin/sh" and spec.command[2:3] == (RAY_HEAD_ARGV0,)


def ray_join_seconds(log_text: str) -> float | None:
    """How long the head waited for its workers' Ray nodes, from the line RAY_NODES_ALIVE prints."""
    found = _RAY_JOINED.findall(log_text)
    return float(found[-1][2]) if found else None


def uses_ray(lane: Lane) -> bool:
    return lane.launcher == "ray" and lane.ranks > 1


def kv_cache_dtype(lane: Lane) -> str | None:
    if lane.kv_cache_dtype == "auto":
        return None
    spelled = _KV_DTYPES.get(lane.kv_cache_dtype, lane.kv_cache_dtype)
    return kv_spelling(lane, "vLLM", {lane.kv_cache_dtype: (spelled,)})


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


def _refuse_unhonoured_ep(ctx: RankContext) -> None:
    """vLLM has no EP size: `--enable-expert-parallel` shards experts over TP x DP within a pipeline stage.

    vllm/model_executor/layers/fused_moe/config.py, `FusedMoEParallelConfig.make`: `use_ep = dp_size * tp_size
    > 1 and enable_expert_parallel`, then `ep_size` is that flattened tp_size. A lane renders no DP, so EP is
    tp; an `ep` that is neither 1 nor tp would quietly run as something else.
    """
    lane = ctx.lane
    if lane.ep in (1, lane.tp) and not (lane.ep > 1 and lane.tp == 1):
        return
    runs = f"EP {lane.tp}" if lane.tp > 1 else "no expert parallelism at all (tp x dp is 1)"
    raise InputError(
        f"lane '{lane.name}': vLLM shards experts over tp x dp within a pipeline stage, so ep {lane.ep} with "
        f"tp {lane.tp} would run {runs}; set ep to {lane.tp if lane.tp > 1 else 1}",
        field="ep",
    )


def render(ctx: RankContext) -> ContainerSpec:
    _refuse_unhonoured_ep(ctx)
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
            str(ctx.ports.dist),
        ]
        if not ctx.is_head:
            argv.append("--headless")
    argv += ctx.lane.args
    env = _network_env(ctx)
    if ctx.multi_node:
        # sparkrun's runtimes/vllm_distributed.py `get_cluster_env` for native multi-node vLLM on Sparks.
        env.update({"NCCL_CUMEM_ENABLE": "0", "OMP_NUM_THREADS": "4"})
    return seal(ctx, image=ctx.lane.image, entrypoint="vllm", command=argv, engine_env=env)


def _render_ray(ctx: RankContext) -> ContainerSpec:
    env = {**_network_env(ctx), "RAY_memory_monitor_refresh_ms": "0"}
    ray_ports = ctx.ports.ray
    if ctx.is_head:
        argv = [
            "-c",
            RAY_HEAD_SCRIPT,
            RAY_HEAD_ARGV0,
            ctx.address,
            str(ctx.ranks),
            str(RAY_JOIN_TIMEOUT_S),
            *ray_ports.start_flags(head=True),
            "vllm",
            *serve_argv(ctx),
            "--distributed-executor-backend",
            "ray",
            *ctx.lane.args,
        ]
        env["RAY_NODES_ALIVE"] = RAY_NODES_ALIVE
        return seal(ctx, image=ctx.lane.image, entrypoint="/bin/sh", command=argv, engine_env=env)
    argv = [
        "start",
        "--address",
        f"{ctx.head_address}:{ray_ports.gcs}",
        "--node-ip-address",
        ctx.address,
        f"--object-store-memory={RAY_OBJECT_STORE_BYTES}",
        *ray_ports.start_flags(head=False),
        "--disable-usage-stats",
        "--block",
    ]
    return seal(ctx, image=ctx.lane.image, entrypoint="ray", command=argv, engine_env=env)


def start_groups(lane: Lane) -> list[tuple[int, ...]]:
    if uses_ray(lane):
        return [(0,), tuple(range(1, lane.ranks))]
    return all_at_once(lane)
