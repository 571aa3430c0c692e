"""SGLang: every rank runs the same `sglang.launch_server`, joined by --nnodes/--node-rank/--dist-init-addr.

SGLang does its own rendezvous (no Ray): rank 0 listens on the
dist-init address, the others connect to it, and only rank 0 serves HTTP.
Flags are spelled as SGLang's `server_args.py` defines them (`--tp-size`,
`--pp-size`, `--ep-size`, `--dcp-size`, `--mem-fraction-static`,
`--context-length`, `--max-running-requests`), which is also how Spark
launchers such as sparkrun render them. Ranks find their own address
through SGLANG_HOST_IP (read by SGLang's `get_ip()`).

The lane's `args` come last, so a lane can override any flag rendered here
(argparse keeps the last value).
"""

from __future__ import annotations

from reconciler.engines.base import BIND_ALL, RankContext, seal
from reconciler.engines.flags import kv_spelling
from reconciler.errors import InputError
from reconciler.facts.container import ContainerSpec

# The lane vocabulary is vLLM-flavoured: SGLang's spellings of it, in order of preference; the flag
# table of the lane's release (engines/flags.py) says which one it accepts. SGLang 0.5.19
# (srt/server_args.py, kv_cache_dtype) takes auto, fp8_e5m2, fp8_e4m3, mxfp8, bf16, bfloat16, nvfp4,
# fp4_mx_block16, fp4_e2m1. "bfloat16" before "bf16": srt/mem_cache/kv_cache_dtype.py reads the two
# alike, but DeepSeek V4 (srt/arg_groups/overrides.py, _deepseek_v4_kv_cache_dtype) asserts
# fp8_e4m3 or bfloat16. NVFP4 is "nvfp4" ("the NVFP4 FP4 E2M1 KV cache recipe"); "fp4_e2m1" is a
# deprecated name refused at start in favour of fp4_mx_block16, an MX block-16 recipe, not NVFP4.
# No fp16 cache and none of vLLM's fixed-slot MLA layouts.
_KV_DTYPES: dict[str, tuple[str, ...]] = {
    "bf16": ("bfloat16", "bf16"),
    "bfloat16": ("bfloat16", "bf16"),
    "fp8": ("fp8_e4m3",),
    "fp8_e4m3": ("fp8_e4m3",),
    "fp8_e5m2": ("fp8_e5m2",),
    "nvfp4": ("nvfp4",),
}


# DeepSeek V4's KV cache in SGLang holds fp8_e4m3 or bfloat16 and nothing else: `auto` becomes
# fp8_e4m3, anything else fails an assertion at start ("... is not supported for ..."). Source:
# sglang 0.5.19 (the PyPI wheel the production build's flag table is read from),
# sglang/srt/arg_groups/overrides.py `_deepseek_v4_kv_cache_dtype`, run at start by
# srt/arg_groups/deepseek_v4_hook.py `apply_deepseek_v4_defaults`; the same in sgl-project/sglang
# main (python/sglang/srt/arg_groups/overrides.py @ 003bbaf). Upstream keys the check on the
# architecture DeepseekV4ForCausalLM; V4.1 runs on the same dsv4 attention backend and page pool
# (sparkrun-recipes' launch-sgl-dsv41.sh passes `--attention-backend dsv4`; the pool,
# srt/mem_cache/deepseek_v4_memory_pool.py, stores 448 + 128 + 8 bytes of fp8 per token). A lane
# model with `compress_ratios` (DeepSeek V4's per-layer compression) is taken for that path.
_DSV4_KV = ("fp8_e4m3", "bfloat16")


def kv_cache_dtype(ctx: RankContext) -> str | None:
    if ctx.lane.kv_cache_dtype == "auto":
        return None
    spelled = kv_spelling(ctx.lane, "SGLang", _KV_DTYPES)
    if ctx.model.architecture.compress_ratios is not None and spelled not in _DSV4_KV:
        raise InputError(
            f"lane '{ctx.lane.name}': SGLang runs DeepSeek V4 models (model '{ctx.lane.model}' has "
            f"compress_ratios) only with a KV cache of fp8_e4m3 or bfloat16 and refuses "
            f"--kv-cache-dtype {spelled} at start; kv_cache_dtype takes fp8_e4m3 (or fp8), bfloat16 "
            "(or bf16) or auto (SGLang then picks fp8_e4m3)",
            field="kv_cache_dtype",
        )
    return spelled


def _refuse_unhonoured_ep(ctx: RankContext) -> None:
    """SGLang splits each MoE layer into tp/ep tensor-parallel groups of experts, so ep must divide tp.

    sglang/srt/model_executor/model_runner_components/moe_ep_setup.py raises "tp_size must be divisible
    by ep_size" (moe_tp_size = tp_size // ep_size // dp_size); an ep across pipeline stages is not one.
    """
    lane = ctx.lane
    if lane.tp % lane.ep:
        fits = [d for d in range(1, lane.tp + 1) if lane.tp % d == 0]
        raise InputError(
            f"lane '{lane.name}': SGLang's --ep-size must divide --tp-size (experts are split within a TP "
            f"group), and ep {lane.ep} does not divide tp {lane.tp}; use one of {fits}",
            field="ep",
        )


def render(ctx: RankContext) -> ContainerSpec:
    _refuse_unhonoured_ep(ctx)
    lane = ctx.lane
    argv = [
        "-m",
        "sglang.launch_server",
        "--model-path",
        ctx.model.path,
        "--served-model-name",
        lane.served_name,
        "--host",
        BIND_ALL,
        "--port",
        str(lane.port),
        "--tp-size",
        str(lane.tp),
    ]
    if lane.pp > 1:
        argv += ["--pp-size", str(lane.pp)]
    if lane.ep > 1:
        argv += ["--ep-size", str(lane.ep)]
    if lane.dcp > 1:
        argv += ["--dcp-size", str(lane.dcp)]
    argv += [
        "--mem-fraction-static",
        str(lane.gpu_memory_utilization),
        "--context-length",
        str(lane.max_model_len),
        "--max-running-requests",
        str(lane.max_num_seqs),
    ]
    dtype = kv_cache_dtype(ctx)
    if dtype is not None:
        argv += ["--kv-cache-dtype", dtype]
    engine_env: dict[str, str] = {}
    if ctx.multi_node:
        argv += [
            "--nnodes",
            str(ctx.ranks),
            "--node-rank",
            str(ctx.rank),
            "--dist-init-addr",
            f"{ctx.head_address}:{ctx.ports.dist}",
        ]
        engine_env.update(
            {
                # Read first by SGLang's get_ip (sglang/srt/utils/network.py: SGLANG_HOST_IP, then HOST_IP).
                "SGLANG_HOST_IP": ctx.address,
                # sparkrun's runtimes/sglang.py `get_cluster_env` sets both for SGLang clusters on Sparks:
                "NCCL_CUMEM_ENABLE": "0",
                # SGLang refuses to start when a rank's free memory before loading is under 0.9 of another's
                # (sglang/srt/distributed/bootstrap.py `_check_tp_memory_balance`, on by default in
                # environ.py); on GB10's unified memory free memory differs per host with its page cache.
                "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK": "0",
            }
        )
    argv += lane.args
    return seal(ctx, image=lane.image, entrypoint="python3", command=argv, engine_env=engine_env)
