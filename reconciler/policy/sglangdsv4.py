"""How SGLang sizes a DeepSeek V4 / V4.1 KV pool, and how many tokens it holds.

Why this module exists: SGLang does not count a DeepSeek V4 "token" the way
a per-layer sum does. Its pool configurator (sglang 0.5.23,
sglang/srt/model_executor/pool_configurator.py DSV4PoolConfigurator, read in
the wheel sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl) splits what
the pool is given into

- bytes that do not grow with the pool: the sliding-window pool, sized from
  the request cap when --max-running-requests and chunked prefill are set
  (cap mode; DeepSeek V4.1 is never given the 0.1 swa_full_tokens_ratio
  default: arg_groups/model_overrides/deepseek_v4.py), and the per-request
  compressor state rings of the ratio-2 and ratio-128 layers;
- bytes per "full" token: per layer that owns compressed storage, its
  paged slot plus indexer key, divided by the layer's ratio
  (`_compressed_bytes_per_full_token`): ratio 4 and 128, every such layer;
  ratio 1 and 2 (DeepSeek V4.1), only the kv_source layers
  (deepseek_v4_memory_pool.py collect_sources_by_ratio), with an MXFP4
  indexer key (index_head_dim / 2 + index_head_dim / 32 bytes) whatever the
  ratio-4 indexer uses.

pool tokens = (available - fixed) // bytes_per_full_token, rounded down to
the 256-token page (page_size 256 for DeepSeek V4 on CUDA:
model_overrides/deepseek_v4.py). A paged slot is padded: a page of
page_size / ratio slots of 584 B (V4 layout: 448 fp8 NoPE + 64 bf16 RoPE +
8 scale bytes) is rounded up to a multiple of 576 B
(kernels/ops/attention/dsv4/kv_layout.py KVLayout.V4 page_bytes). The V4.1
packed layouts exist only on SM100/SM103 (select_dsv4_kv_layout), so a GB10
runs the V4 layout. The sliding-window pool spans every layer of the stage.

The cap (compute_swa_request_cap, same file): per request window +
eviction interval (SGLANG_SWA_EVICTION_INTERVAL, 128) x draft tokens + a
page, plus a page of decode allocation without speculation; times
--max-running-requests, plus two chunks in flight (overlap scheduling on)
and a page; plus 4 x --max-running-requests cached prefix tails of window +
page each (radix cache on; none when it is off: `_resolve_swa_prefix_tails`).
Chunked prefill defaults to 8192 on a device of 90-160 GiB
(arg_groups/memory_hook.py), which a GB10's 121.7 GiB is.

Speculative decoding inflates both per-token figures by (T + 1) / T
(target layers T, one draft layer) when it is on: budget.py takes that as
the drafter's KV (`draft_kv_bytes`). Under DSpark the cap's decode
allocation depends on the draft schedule, which this module does not model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from reconciler.policy.engine_memory import arg_value
from reconciler.spec.lane import Lane
from reconciler.spec.model import Architecture

PAGE = 256  # arg_groups/model_overrides/deepseek_v4.py: page_size 256 on CUDA
SLOT_ALIGN = 576  # KVLayout.V4.page_align: the page stride is padded to this
SWA_EVICTION_INTERVAL = 128  # environ.py SGLANG_SWA_EVICTION_INTERVAL default
GB10_CHUNK = 8192  # memory_hook.py: chunked_prefill_size on a 90-160 GiB device
CHUNKS_IN_FLIGHT = 2  # overlap scheduling on (the default): two chunks in flight
STATE_BYTES = 4  # SGLANG_DSV4_COMPRESS_STATE_DTYPE float32 (the default)
RING = {2: 2, 4: 8, 128: 128}  # get_compress_state_ring_size without speculation
SPEC_RING = {4: 16, 128: 256}  # ... with speculation (ratio 2: pow2 >= 2 + draft tokens)


def slot_bytes(arch: Architecture) -> int:
    """SGLang's FlashMLA V4 slot whatever --kv-cache-dtype says: fp8 NoPE + bf16 RoPE + 8 scale bytes
    (DSV4PoolConfigurator kv_bytes = qk_nope_head_dim + 2 x qk_rope_head_dim + 8)."""
    if arch.kv_slot_bytes is not None:
        return arch.kv_slot_bytes
    return (arch.kv_lora_rank or 0) + 2 * (arch.rope_dim or 0) + 8


def padded_slot(width: float, ratio: float) -> float:
    """Bytes per slot of a ratio-r cache: a page of PAGE / r slots padded to SLOT_ALIGN."""
    slots = max(1, int(PAGE // max(ratio, 1.0)))
    raw = math.ceil(slots * width)
    return math.ceil(raw / SLOT_ALIGN) * SLOT_ALIGN / slots


def fp4_index_bytes(index_head_dim: int) -> int:
    """The ratio-1/2 indexer key in MXFP4: two values a byte and a UE8M0 scale per 32
    (get_dsv4_indexer_bytes_per_token)."""
    return index_head_dim // 2 + index_head_dim // 32


@dataclass(frozen=True)
class DSV4Settings:
    """The lane's figures SGLang's DeepSeek V4 pool depends on."""

    max_requests: int
    chunk: int
    radix: bool
    draft_tokens: int = 0
    """speculative_num_draft_tokens, 0 without speculation."""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def speculative(self) -> bool:
        return self.draft_tokens > 0


def dsv4_settings(lane: Lane) -> DSV4Settings:
    chunk_arg = arg_value(lane.args, "--chunked-prefill-size")
    chunk = int(chunk_arg) if chunk_arg is not None and chunk_arg.lstrip("-").isdigit() else GB10_CHUNK
    radix = not any(a == "--disable-radix-cache" for a in lane.args)
    draft = 0
    if arg_value(lane.args, "--speculative-algorithm") is not None:
        raw = arg_value(lane.args, "--speculative-num-draft-tokens")
        draft = int(raw) if raw is not None and raw.isdigit() else 1
    notes = [
        f"SGLang DeepSeek V4 pool: {PAGE}-token pages, the sliding-window pool sized from the request cap "
        f"({lane.max_num_seqs} requests, {chunk}-token chunks, radix cache {'on' if radix else 'off'})"
    ]
    return DSV4Settings(
        max_requests=lane.max_num_seqs, chunk=chunk, radix=radix, draft_tokens=draft, notes=tuple(notes)
    )


def swa_cap_tokens(window: int, settings: DSV4Settings) -> int:
    """Sliding-window slots SGLang reserves in cap mode (compute_swa_request_cap + prefix-tail headroom)."""
    draft = max(settings.draft_tokens, 1)
    per_request = window + SWA_EVICTION_INTERVAL * draft + PAGE + PAGE
    cap = per_request * settings.max_requests + CHUNKS_IN_FLIGHT * settings.chunk + PAGE
    tails = 4 * settings.max_requests if settings.radix else 0
    return math.ceil((cap + tails * (window + PAGE)) / PAGE) * PAGE


@dataclass(frozen=True)
class DSV4Pool:
    """SGLang's split of a DeepSeek V4 pool: bytes per full token and bytes that do not grow."""

    per_token: float
    """bytes_per_full_token without speculation's inflation."""
    fixed: dict[str, int]
    """by part: sliding (the cap-mode window pool), compressor (ratio-2 and ratio-128 state rings)."""
    inflation: float = 1.0
    """(T + 1) / T with speculative decoding, 1 without."""

    def tokens(self, available: int) -> int | None:
        """Full tokens the pool holds with `available` bytes, as calculate_pool_sizes rounds them (None: no
        layer keeps a compressed cache, so nothing grows with the tokens)."""
        if self.per_token <= 0:
            return None
        left = available - sum(self.fixed.values())
        if left <= 0:
            return 0
        return int(left / (self.per_token * self.inflation)) // PAGE * PAGE


def dsv4_pool(
    counts: Mapping[tuple[str, float, bool], int],
    arch: Architecture,
    width: float,
    index_width: float,
    settings: DSV4Settings,
) -> DSV4Pool:
    """SGLang's DeepSeek V4 pool for one stage whose layers are `counts` (kv.py's kinds)."""
    layers = sum(counts.values())
    head = (arch.kv_lora_rank or 0) + (arch.rope_dim or 0)
    low_index = fp4_index_bytes(arch.index_head_dim) if arch.index_head_dim else 0
    per_token = 0.0
    owners: dict[float, int] = {}
    for (kind, ratio, indexed), n in counts.items():
        if kind != "compressed":
            continue
        owners[ratio] = owners.get(ratio, 0) + n
        index = 0.0
        if indexed:
            index = low_index if ratio in (1.0, 2.0) else index_width
        per_token += n * (padded_slot(width, ratio) + index) / ratio
    spec = settings.speculative
    c4_ring = (SPEC_RING if spec else RING)[4]
    # c4 compress state rides on every SWA slot (_get_bytes_per_swa_token).
    c4_state = c4_ring / PAGE * 4 * (head + (arch.index_head_dim or 0)) * STATE_BYTES * owners.get(4.0, 0)
    per_swa = padded_slot(width, 1.0) * layers + c4_state
    inflation = (layers + 1) / layers if spec and layers else 1.0
    swa = 0
    if arch.sliding_window:
        swa = math.ceil(swa_cap_tokens(arch.sliding_window, settings) * per_swa * inflation)
    slots = settings.max_requests + 1
    compressor = 0
    if owners.get(2.0):
        ring = 1 << (settings.draft_tokens + 1).bit_length() if spec else RING[2]
        rows = math.ceil((slots * ring + ring + 1) / 2) * 2
        compressor += rows * 2 * head * STATE_BYTES * owners[2.0]
    if owners.get(128.0):
        ring = (SPEC_RING if spec else RING)[128]
        rows = math.ceil((slots * ring + ring + 1) / 128) * 128
        compressor += rows * 2 * head * STATE_BYTES * owners[128.0]
    fixed = {k: v for k, v in (("sliding", swa), ("compressor", compressor)) if v}
    return DSV4Pool(per_token=per_token, fixed=fixed, inflation=inflation)
