"""vLLM's pages for DeepSeek V4 under fp8_ds_mla: every cache is paid in whole, padded pages.

Why this module exists: vLLM keeps DeepSeek V4's five caches (compressed KV,
the indexer's keys, the sliding window, the compressor states of the main
and of the indexer) in one block pool, so their pages are made to agree:
each page is rounded up to FlashMLA's 576 B alignment
(vllm/models/deepseek_v4/compressor.py CompressorStateCache.get_kv_cache_spec,
`alignment=576 if uses_fp8_ds_mla_layout`, and the same in
vllm/v1/attention/backends/mla/sparse_swa.py), and the caches then share
three page sizes (the vLLM blog post "DeepSeek V4 in vLLM: Efficient
Long-context Attention", vllm.ai, 2026-04-24, "Unifying page sizes": largest
bucket c4a main KV, SWA KV, c4a and c128a compressor states; middle bucket
the C4 indexer KV and the indexer's compressor state; smallest bucket the
c128a main KV; 1,728, 8,640 and 37,440 B per block, which dsv4_pages gives
for V4's 584 B slot, 132 B indexer key and 512-wide head).
Counting bytes per token instead leaves out the padding: a C4 compressor
state block (4 rows of 8,192 B = 32,768 B) is paid as 37,440 B, a c128a
block (2 slots of 584 B) as 1,728 B.

A compressed block covers 256 tokens (the KV block shape [256 // 4, 584] in
compressor.py), the sliding window 64 tokens (DeepseekV4SWACache), a
compressor state block 4 rows at ratio 4 and 8 at ratio 128.

Measured against eugr/spark-vllm-docker recipes/deepseek-v4-flash-0731-1m.yaml
(vLLM's "11.04 GiB KV cache is needed" for one 1,048,576-token request at
tp 2): the padding moves lanes from 8.69 to 9.35 GiB; the rest (about 1.7
GiB, growing with max_num_batched_tokens: 17.85 GiB needed at 16,384) is
not accounted for here (bench/README.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ALIGNMENT = 576  # FlashMLA's fp8_ds_mla page alignment (vLLM CompressorStateCache, DeepseekV4SWACache)
COMPRESSED_BLOCK_TOKENS = 256
SLIDING_BLOCK_TOKENS = 64
STATE_ROWS = {4.0: 4, 128.0: 8}  # CompressorStateCache.block_size by compress ratio
FP32 = 4


def aligned(size: int) -> int:
    return math.ceil(size / ALIGNMENT) * ALIGNMENT


@dataclass(frozen=True)
class DSV4Pages:
    """The three page sizes, in bytes, of one rank's DeepSeek V4 pool."""

    large: int
    """c4a compressed KV, sliding window, main compressor states (ratio 4 and 128)."""
    middle: int
    """indexer keys, the indexer's compressor state."""
    small: int
    """c128a compressed KV."""


def dsv4_pages(slot: int, index_slot: float, head_dim: int, index_head_dim: int | None) -> DSV4Pages:
    """Each bucket's page: its caches' pages aligned to 576 B, the bucket paying its largest."""
    c4_kv = aligned(COMPRESSED_BLOCK_TOKENS // 4 * slot)
    swa = aligned(SLIDING_BLOCK_TOKENS * slot)
    c4_state = aligned(STATE_ROWS[4.0] * 2 * 2 * head_dim * FP32)
    c128_state = aligned(STATE_ROWS[128.0] * 2 * head_dim * FP32)
    middle = 0
    if index_head_dim:
        index_kv = aligned(math.ceil(COMPRESSED_BLOCK_TOKENS // 4 * index_slot))
        index_state = aligned(STATE_ROWS[4.0] * 2 * 2 * index_head_dim * FP32)
        middle = max(index_kv, index_state)
    small = aligned(COMPRESSED_BLOCK_TOKENS // 128 * slot)
    return DSV4Pages(large=max(c4_kv, swa, c4_state, c128_state), middle=middle, small=small)


def compressed_bytes(pages: DSV4Pages, ratio: float, tokens: int) -> int:
    """One layer's compressed KV for `tokens` tokens, in whole pages."""
    page = pages.large if ratio == 4.0 else pages.small
    return math.ceil(tokens / COMPRESSED_BLOCK_TOKENS) * page


def indexer_bytes(pages: DSV4Pages, tokens: int) -> int:
    return math.ceil(tokens / COMPRESSED_BLOCK_TOKENS) * pages.middle


def sliding_bytes(pages: DSV4Pages, reserved: int) -> int:
    """`reserved` is the window's tokens as vLLM reserves them (a whole number of 64-token blocks)."""
    return math.ceil(reserved / SLIDING_BLOCK_TOKENS) * pages.large


def compressor_bytes(pages: DSV4Pages, ratio: float, rows: int, indexed: bool) -> int:
    """One ratio-r layer's compressor states for `rows` reserved rows: main, and the indexer's at ratio 4."""
    per_block = STATE_ROWS.get(ratio)
    if per_block is None:
        return 0
    blocks = math.ceil(rows / per_block)
    total = blocks * pages.large
    if ratio == 4.0 and indexed and pages.middle:
        total += blocks * pages.middle
    return total
