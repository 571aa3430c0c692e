"""What vLLM reserves for a cache that keeps only the last tokens of a sequence.

Why this module exists: a sliding window looks cheap (128 tokens), but vLLM
frees out-of-window blocks only once the tokens in flight are settled, so at
start it reserves, per sequence and layer,

    (cdiv(min(window - 1 + in_flight, max_model_len), block) + 1) x block tokens

(vllm/v1/kv_cache_interface.py SlidingWindowSpec.max_admission_blocks_per_request,
vllm 0.33.0; `in_flight` from enginekv.py). The same bound sizes DeepSeek
V4's compressor states, which vLLM keeps as sliding-window caches of fp32
rows (vllm/models/deepseek_v4/compressor.py CompressorStateCache,
vllm 0.33.0): a ratio-r compressor with overlap factor coff (2 at r = 4, 1
at r = 128) keeps a window of coff x r rows of 2 x coff x head_dim fp32
values (kv_state + score_state), in blocks of 4 rows (r = 4) or 8 (r = 128);
the indexer's own ratio-4 compressor does the same at the indexer's width.
With a large in-flight figure these tiny windows cost more than the
compressed cache itself (the same effect, for a convolution state, is
vllm-project/vllm issue 54703). Page padding to the 576 B alignment and to
the other groups' page size is not counted.
"""

from __future__ import annotations

import math

FP32 = 4
COMPRESSOR_BLOCK = {4.0: 4, 128.0: 8}  # CompressorStateCache.block_size by compress ratio


def reserved_tokens(window: int, in_flight: int | None, length: int, block: int) -> int:
    """Tokens one sequence holds in a sliding-window cache; the window alone when in_flight is unknown."""
    if in_flight is None:
        return min(length, window)
    return (math.ceil(min(window - 1 + in_flight, length) / block) + 1) * block


def compressor_state_bytes(
    ratio: float, head_dim: int, index_head_dim: int | None, in_flight: int | None, length: int
) -> int:
    """Bytes of DeepSeek V4's compressor state caches on one ratio-r layer, for one sequence (0 for other ratios)."""
    block = COMPRESSOR_BLOCK.get(ratio)
    if block is None:
        return 0
    coff = 2 if ratio == 4.0 else 1
    window = coff * int(ratio)
    rows = reserved_tokens(window, in_flight, length, block)
    total = rows * 2 * coff * head_dim * FP32
    if ratio == 4.0 and index_head_dim:
        total += rows * 2 * coff * index_head_dim * FP32
    return total
