"""vLLM's one page size for hybrid attention + linear-attention models.

Why this module exists: vLLM keeps every KV cache group of a model in one
block pool, so all groups must share one page size. For a model mixing
attention with linear attention (mamba, gated delta net: Qwen3-Next,
Qwen3.5) that page is set by the linear layers' fixed state, not by the
attention layers, and one sequence costs whole pages in every group. The
per-layer sum undercounts what vLLM allocates; these are the two figures that
decide by how much. From vllm 0.33.0:

- The attention block grows until one attention page holds a linear state:
  block = align x cdiv(state, align x token_bytes), align being the kernel's
  block (the cache block size, 128 for MLA); the state is padded up to that
  page (vllm/platforms/interface.py Platform._align_hybrid_block_size).
- Layers are grouped by kind into groups of equal size: the smallest kind
  count, or the largest when it is under 1.5 x the smallest; a kind fills
  cdiv(count, size) groups, the last one padded
  (vllm/v1/core/kv_cache_planning.py _get_kv_cache_groups_uniform_page_size).
  One sequence then takes, per group, size x page x its blocks: cdiv(tokens,
  block) for attention, the state blocks for linear layers
  (kv_cache_utils.py get_max_concurrency_for_kv_cache_config).
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def unified_block(token_bytes: float, state_bytes: int, block_size: int, mla: bool) -> int:
    """Tokens per attention block once its page must hold one linear state."""
    if not token_bytes or not state_bytes:
        return block_size
    align = max(block_size, 128) if mla else block_size
    return max(block_size, align * math.ceil(state_bytes / (align * token_bytes)))


def unified_page(token_bytes: float, state_bytes: int, block: int) -> int:
    """Bytes of the one page every group uses: the attention page, which the padded state fits."""
    return max(math.ceil(block * token_bytes), state_bytes)


def group_size(counts: Iterable[int]) -> int:
    """Layers per KV cache group for these per-kind layer counts."""
    sizes = [n for n in counts if n]
    size = min(sizes)
    return max(sizes) if max(sizes) < size * 1.5 else size
