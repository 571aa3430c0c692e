"""The engine settings that change what one sequence's KV cache costs.

Why this module exists: the KV arithmetic (kv.py) is the same for every
engine only for full-attention layers. Sliding-window layers, hybrid
linear-attention layers and pipeline stages are sized by each engine its own
way, from scheduler figures the lane sets in its args or leaves at the
engine's default. This module reads those figures off the lane, once, with
the source of every default beside it.

vLLM (figures read in the vllm wheels 0.25.1, 0.26.0, 0.29.0, 0.32.0, 0.33.0):

- A sliding-window layer reserves, per sequence,
  cdiv(min(window - 1 + in_flight, max_model_len), block_size) + 1 blocks
  (vllm/v1/kv_cache_interface.py SlidingWindowSpec.max_admission_blocks_per_request).
  Before 0.26.0 in_flight is max_num_batched_tokens; from 0.26.0 it is
  max_concurrent_batches x max_num_batched_tokens (vllm/config/vllm.py
  VllmConfig.max_in_flight_tokens), where max_concurrent_batches is pp, or
  with async scheduling (on by default) 2 at pp = 1 and pp + 1 at pp > 1 on
  the V2 model runner (the V1 runner turns async scheduling off under pp and
  gives pp; lanes takes the larger).
- max_num_batched_tokens: --max-num-batched-tokens when the lane sets it,
  else the `vllm serve` default for the hardware
  (vllm/engine/arg_utils.py EngineArgs.get_batch_defaults): on a GB10 (more
  than 70 GiB of device memory, less than 160) 8192 before 0.33.0 and 2048
  from 0.33.0, which keeps GB10 on the small tier; doubled by
  --performance-mode throughput; raised to max_model_len when chunked prefill
  is off; then capped at max_num_seqs x max_model_len
  (_set_default_max_num_seqs_and_batched_tokens_args).
- block_size 16 (vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE) unless
  --block-size; MLA backends use 64-token blocks (DeepseekV4SWACache's
  default block_size 64 in vllm/v1/attention/backends/mla/sparse_swa.py).
- Hybrid attention + mamba/linear models: every layer group shares one page
  size (vllm/platforms/interface.py Platform._align_hybrid_block_size,
  vllm/v1/core/kv_cache_planning.py unify_kv_cache_spec_page_size); a linear
  layer keeps 1 state block per sequence, or 2 when prefix caching is on
  (mamba_cache_mode 'align', the default for hybrid models: vllm/model_executor
  /models/config.py MambaModelConfig, vllm/v1/kv_cache_interface.py
  MambaSpec.max_memory_usage_bytes).

SGLang serving a DeepSeek V4 model sizes its pool its own way
(sglangdsv4.py). Other engines keep the window-only sliding estimate and the
plain per-layer linear state; the notes say which figures were the engine's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from reconciler.policy.engine_memory import arg_value
from reconciler.policy.sglangdsv4 import DSV4Settings, dsv4_settings
from reconciler.spec.lane import Lane
from reconciler.spec.model import Architecture

VLLM_BLOCK_SIZE = 16  # vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE (0.33.0)
VLLM_MLA_BLOCK_SIZE = 64  # vllm/v1/attention/backends/mla/sparse_swa.py DeepseekV4SWACache block_size (0.33.0)
# `vllm serve` default max_num_batched_tokens on a GB10 (vllm/engine/arg_utils.py get_batch_defaults):
# the >= 70 GiB tier (8192) until 0.32.0; 0.33.0 keeps GB10 (capability 12.1) on the small tier (2048).
VLLM_GB10_BATCHED_TOKENS_OLD = 8192
VLLM_GB10_BATCHED_TOKENS = 2048
VLLM_GB10_SMALL_TIER_FROM = Version("0.33.0")
VLLM_IN_FLIGHT_FROM = Version("0.26.0")  # VllmConfig.max_in_flight_tokens first appears in 0.26.0


@dataclass(frozen=True)
class KVSettings:
    """Engine figures the KV arithmetic needs beyond the model and the lane's shape."""

    engine: str = "vllm"
    block_size: int = VLLM_BLOCK_SIZE
    in_flight_tokens: int | None = None
    """vLLM's sliding-window reserve past the window; None sizes sliding layers by the window alone."""
    linear_blocks: int = 1
    """State blocks a linear/mamba layer keeps per sequence."""
    unify_pages: bool = False
    """vLLM: hybrid models pad every layer group to one page size."""
    dsv4: DSV4Settings | None = None
    """SGLang serving a DeepSeek V4 model: the figures its own pool arithmetic reads (sglangdsv4.py)."""
    notes: tuple[str, ...] = field(default_factory=tuple)


def has_flag(args: tuple[str, ...], flag: str) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for arg in args)


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def vllm_batched_tokens(lane: Lane, version: Version | None) -> tuple[int, str]:
    """max_num_batched_tokens as vLLM settles it for this lane, and where it came from."""
    given = arg_value(lane.args, "--max-num-batched-tokens")
    if given is not None and given.isdigit():
        return int(given), f"--max-num-batched-tokens {given}"
    small = version is None or version >= VLLM_GB10_SMALL_TIER_FROM
    tokens = VLLM_GB10_BATCHED_TOKENS if small else VLLM_GB10_BATCHED_TOKENS_OLD
    source = f"vLLM's GB10 default {tokens}"
    if arg_value(lane.args, "--performance-mode") == "throughput":
        tokens *= 2
        source += " x 2 (--performance-mode throughput)"
    if has_flag(lane.args, "--no-enable-chunked-prefill"):
        tokens = max(lane.max_model_len, tokens)
        source += ", at least max_model_len (chunked prefill off)"
    capped = min(lane.max_num_seqs * lane.max_model_len, tokens)
    if capped < tokens:
        source += f", capped at max_num_seqs x max_model_len = {capped}"
    return capped, source


def vllm_concurrent_batches(lane: Lane, version: Version | None) -> int:
    """VllmConfig.max_concurrent_batches with the default async scheduling (1 before 0.26.0)."""
    if version is not None and version < VLLM_IN_FLIGHT_FROM:
        return 1
    if has_flag(lane.args, "--no-async-scheduling"):
        return lane.pp
    return 2 if lane.pp == 1 else lane.pp + 1


def kv_settings(lane: Lane, arch: Architecture) -> KVSettings:
    """The engine figures for this lane's KV arithmetic."""
    if lane.engine != "vllm":
        if lane.engine == "sglang" and arch.compress_ratios is not None:
            dsv4 = dsv4_settings(lane)
            return KVSettings(engine=lane.engine, dsv4=dsv4, notes=dsv4.notes)
        return KVSettings(engine=lane.engine, notes=())
    version = _version(lane.engine_version.split("+", 1)[0])
    block = arg_value(lane.args, "--block-size")
    if block is not None and block.isdigit():
        block_size = int(block)
    else:
        block_size = VLLM_MLA_BLOCK_SIZE if arch.attention == "mla" else VLLM_BLOCK_SIZE
    notes = []
    in_flight = None
    has_sliding = bool(arch.sliding_window) and (
        arch.sliding_window_layers > 0
        or (arch.layer_types is not None and "sliding" in arch.layer_types)
        or arch.compress_ratios is not None
    )
    if has_sliding:
        batched, source = vllm_batched_tokens(lane, version)
        batches = vllm_concurrent_batches(lane, version)
        in_flight = batched * batches
        notes.append(
            f"sliding-window layers keep window - 1 + {in_flight} in-flight tokens ({batches} x {source}) "
            f"plus a {block_size}-token block, as vLLM reserves them"
        )
    has_linear = arch.linear_layers > 0 or (arch.layer_types is not None and "linear" in arch.layer_types)
    prefix_off = has_flag(lane.args, "--no-enable-prefix-caching") or arg_value(lane.args, "--mamba-cache-mode") == (
        "none"
    )
    linear_blocks = 1 if prefix_off else 2
    if has_linear:
        notes.append(
            f"hybrid model: vLLM pads linear-state and attention pages to one size; {linear_blocks} state "
            f"block(s) per linear layer and sequence ({'prefix caching off' if prefix_off else 'prefix caching on'})"
        )
    return KVSettings(
        engine="vllm",
        block_size=block_size,
        in_flight_tokens=in_flight,
        linear_blocks=linear_blocks,
        unify_pages=has_linear,
        notes=tuple(notes),
    )
