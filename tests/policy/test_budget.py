"""Table tests for the per-rank memory budget, every figure computed by hand.

Each case is one lane on one model; the expected bytes are written out as
the arithmetic the engines do (kv.py and budget.py cite where), so a change in
the rule shows up as a changed number here, not as a silently different
verdict.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from reconciler.policy import RankBudget, evaluate
from reconciler.spec.model import Architecture

from .builders import GIB, gqa, mla, one_lane_state, repo_policies, with_profile

pytestmark = pytest.mark.timeout(30)

POLICIES = with_profile(repo_policies(), "unit", torch_visible_gib=100)
UNIT_VISIBLE = 100 * GIB
VLLM_OVERHEAD = int(6.9 * GIB)  # rules.yaml overhead_gib.vllm

DSV4_RATIOS = (1.0, 4.0, 128.0, 1.0)


def budgets(arch: Architecture, **lane: Any) -> list[RankBudget]:
    lane.setdefault("gpu_memory_utilization", 0.5)
    desired = one_lane_state(arch, hardware="unit", **lane)
    return list(evaluate(desired, POLICIES).budgets)


def kv_of(arch: Architecture, **lane: Any) -> list[int]:
    return [b.kv_min for b in budgets(arch, **lane)]


# (id, architecture, lane fields, expected kv_min per rank)
CASES: list[tuple[str, Architecture, dict[str, Any], list[int]]] = [
    # MHA: 2 (K and V) x 8 heads x 64 x 2 B (bf16) = 2048 B per token per layer; x 1000 tokens x 2 layers.
    (
        "mha-bf16",
        gqa(layers=2, kv_heads=8, head_dim=64, num_heads=8),
        {"kv_cache_dtype": "bf16", "max_model_len": 1000},
        [2048 * 1000 * 2],
    ),
    # GQA 8 KV heads over tp 4: 2 heads per rank: 2 x 2 x 128 x 2 B = 1024 B; x 131072 x 60 (MiniMax-like).
    (
        "gqa-tp4",
        gqa(layers=60, kv_heads=8, head_dim=128, num_heads=64),
        {"tp": 4, "kv_cache_dtype": "bf16", "max_model_len": 131072},
        [1024 * 131072 * 60] * 4,
    ),
    # GQA 2 KV heads < tp 4: one head replicated per rank: 2 x 1 x 128 x 1 B (fp8) = 256 B; x 4096 x 10.
    (
        "gqa-kv-heads-below-tp",
        gqa(layers=10, kv_heads=2, head_dim=128, num_heads=8),
        {"tp": 4, "kv_cache_dtype": "fp8", "max_model_len": 4096},
        [256 * 4096 * 10] * 4,
    ),
    # MLA: (512 + 64) x 2 B = 1152 B per token per layer, whole on each of the 4 TP ranks; x 8192 x 10.
    (
        "mla-tp4",
        mla(layers=10),
        {"tp": 4, "kv_cache_dtype": "bf16", "max_model_len": 8192},
        [1152 * 8192 * 10] * 4,
    ),
    # MLA with dcp 2: each rank keeps ceil(8192 / 2) = 4096 tokens.
    (
        "mla-dcp2",
        mla(layers=10),
        {"tp": 4, "dcp": 2, "kv_cache_dtype": "bf16", "max_model_len": 8192},
        [1152 * 4096 * 10] * 4,
    ),
    # dcp 4 on an odd length: ceil(8191 / 4) = 2048 tokens.
    (
        "mla-dcp4-odd",
        mla(layers=10),
        {"tp": 4, "dcp": 4, "kv_cache_dtype": "bf16", "max_model_len": 8191},
        [1152 * 2048 * 10] * 4,
    ),
    # MLA at fp8 (not a slot layout): 576 x 1 B.
    (
        "mla-fp8",
        mla(layers=10),
        {"tp": 2, "kv_cache_dtype": "fp8", "max_model_len": 8192},
        [576 * 8192 * 10] * 2,
    ),
    # Fixed slot fp8_ds_mla: 656 B per token per layer (rules.yaml mla_slot_bytes), whatever the latent.
    (
        "mla-fp8-ds-mla",
        mla(layers=10),
        {"tp": 2, "kv_cache_dtype": "fp8_ds_mla", "max_model_len": 8192},
        [656 * 8192 * 10] * 2,
    ),
    # nvfp4_ds_mla on a non-V4 model: the B12X sparse-MLA backend's 368 B record (policies/rules.yaml),
    # which GLM-5.2's published 2,046,464 B per 64-token block matches; 656 B was the fp8 stand-in.
    (
        "mla-nvfp4-ds-mla",
        mla(layers=10),
        {"tp": 2, "kv_cache_dtype": "nvfp4_ds_mla", "max_model_len": 8192},
        [368 * 8192 * 10] * 2,
    ),
    # DeepSeek V4 packs 584 B (448 NoPE + 128 RoPE + 8 scale) for fp8_ds_mla ...
    (
        "dsv4-fp8-ds-mla",
        mla(layers=10, kv_lora_rank=448, kv_slot_bytes=584),
        {"tp": 2, "kv_cache_dtype": "fp8_ds_mla", "max_model_len": 8192},
        [584 * 8192 * 10] * 2,
    ),
    # ... and for nvfp4_ds_mla.
    (
        "dsv4-nvfp4-ds-mla",
        mla(layers=10, kv_lora_rank=448, kv_slot_bytes=584),
        {"tp": 2, "kv_cache_dtype": "nvfp4_ds_mla", "max_model_len": 8192},
        [584 * 8192 * 10] * 2,
    ),
    # compress_ratios [1, 4, 128, 1], window 128, 584 B slots, 10000 tokens, on vLLM 0.32.0 (the builders'
    # lane), in bytes per row: nvfp4_ds_mla, whose pages vLLM does not align (fp8_ds_mla's 576 B-aligned
    # pages are tests/policy/test_kv_engines.py's): every layer keeps a sliding window (DeepseekV4SWACache)
    # of 64-token blocks holding
    # min(128 - 1 + in_flight, 10000) tokens, in_flight = 2 async batches x min(8 seqs x 10000, 8192) = 16384,
    # so 10000 tokens: cdiv(10000, 64) = 157 blocks + 1 = 158 = 10112 tokens per layer, on all 4 layers;
    # compressed: r=4: ceil(10000/4) = 2500; r=128: ceil(10000/128) = 79. The compressor states are
    # sliding windows of fp32 rows too: r=4 keeps min(8 - 1 + 16384, 10000) = 10000 rows in blocks of 4,
    # cdiv(10000, 4) + 1 = 2501 blocks = 10004 rows of 2 x 2 x 512 x 4 = 8192 B; r=128 keeps 10000 rows in
    # blocks of 8, 1251 blocks = 10008 rows of 2 x 1 x 512 x 4 = 4096 B.
    (
        "dsv4-compress-ratios",
        mla(layers=4, kv_lora_rank=448, kv_slot_bytes=584, compress_ratios=DSV4_RATIOS, sliding_window=128),
        {"kv_cache_dtype": "nvfp4_ds_mla", "max_model_len": 10000},
        [584 * (4 * 10112 + 2500 + 79) + 10004 * 8192 + 10008 * 4096],
    ),
    # Same with the indexer: 128 fp8 + 4 B fp32 scale = 132 B per slot, on the ratio-4 layer only, and its
    # own ratio-4 compressor state: 10004 rows of 2 x 2 x 128 x 4 = 2048 B.
    (
        "dsv4-indexer",
        mla(
            layers=4,
            kv_lora_rank=448,
            kv_slot_bytes=584,
            compress_ratios=DSV4_RATIOS,
            sliding_window=128,
            index_head_dim=128,
        ),
        {"kv_cache_dtype": "nvfp4_ds_mla", "max_model_len": 10000},
        [584 * (4 * 10112 + 2500 + 79) + 132 * 2500 + 10004 * (8192 + 2048) + 10008 * 4096],
    ),
    # At 100 tokens the window reserve is capped by the context: in_flight 2 x min(8 x 100, 8192) = 1600,
    # min(127 + 1600, 100) = 100 tokens: cdiv(100, 64) = 2 blocks + 1 = 192 tokens on each of the 4 layers;
    # compressed ceil(100/4) = 25 and ceil(100/128) = 1; compressor states: r=4 cdiv(100, 4) + 1 = 26 blocks
    # = 104 rows of 8192 B, r=128 cdiv(100, 8) + 1 = 14 blocks = 112 rows of 4096 B.
    (
        "dsv4-short-context",
        mla(layers=4, kv_lora_rank=448, kv_slot_bytes=584, compress_ratios=DSV4_RATIOS, sliding_window=128),
        {"kv_cache_dtype": "nvfp4_ds_mla", "max_model_len": 100},
        [584 * (4 * 192 + 25 + 1) + 104 * 8192 + 112 * 4096],
    ),
    # Indexer on a plain MLA model (GLM-5 / V3.2 style): 576 B latent + 132 B indexer (128 fp8 + 4 B fp32
    # scale) per token per layer.
    (
        "mla-indexer",
        mla(layers=2, index_head_dim=128),
        {"kv_cache_dtype": "fp8", "max_model_len": 1000},
        [(576 + 132) * 1000 * 2],
    ),
    # Interleaved sliding window, 2 x 2 x 128 x 2 = 1024 B/token: vLLM reserves min(256 - 1 + in_flight, 1000)
    # = 1000 tokens (in_flight = 2 x min(8 x 1000, 8192) = 16000) in cdiv(1000, 16) + 1 = 64 blocks of 16,
    # 1024 tokens, on each of the 3 sliding layers.
    (
        "interleaved-swa",
        gqa(layers=4, kv_heads=2, head_dim=128, num_heads=8, sliding_window=256, sliding_window_layers=3),
        {"kv_cache_dtype": "bf16", "max_model_len": 1000},
        [1024 * 1000 + 3 * 1024 * 1024],
    ),
    # Hybrid on vLLM, one page size for all: 1 attention layer (1024 B/token) + 3 linear layers of 1,000,000 B.
    # Block 16 x cdiv(1,000,000, 16 x 1024) = 992 tokens, page 992 x 1024 = 1,015,808 B; groups of 1 layer:
    # attention cdiv(1000, 992) = 2 pages, each linear layer 2 pages (prefix caching on): 8 pages.
    (
        "hybrid-linear",
        gqa(layers=4, kv_heads=2, head_dim=128, num_heads=8, linear_layers=3, linear_state_bytes=1_000_000),
        {"kv_cache_dtype": "bf16", "max_model_len": 1000},
        [8 * 1_015_808],
    ),
    # Hybrid at tp 2: one KV head per rank (512 B/token) and half the state (500,000 B): block
    # 16 x cdiv(500,000, 16 x 512) = 992, page 992 x 512 = 507,904 B; 8 pages as above.
    (
        "hybrid-linear-tp2",
        gqa(layers=4, kv_heads=2, head_dim=128, num_heads=8, linear_layers=3, linear_state_bytes=1_000_000),
        {"tp": 2, "kv_cache_dtype": "bf16", "max_model_len": 1000},
        [8 * 507_904] * 2,
    ),
    # pp 3 over 10 layers as vLLM cuts them (the left-over layer goes to the stage before the last):
    # 3, 4, 3 layers of 2 x 8 x 128 x 2 = 4096 B/token.
    (
        "pp3",
        gqa(layers=10, kv_heads=8, head_dim=128, num_heads=32),
        {"pp": 3, "kv_cache_dtype": "bf16"},
        [4096 * 1000 * 3, 4096 * 1000 * 4, 4096 * 1000 * 3],
    ),
    # tp 2 x pp 2: ranks 0-1 are stage 0 (layers 0-1), ranks 2-3 stage 1 (layers 2-3) of the DSv4 ratios;
    # pp 2 runs 3 batches in flight: 3 x 8192 = 24576, so each layer's window holds 10000 tokens, 10112
    # in whole 64-token blocks, and the compressor states 10004 rows of 8192 B (r=4) and 10008 of 4096 B
    # (r=128), as above.
    (
        "pp2-compress-ratios",
        mla(layers=4, kv_lora_rank=448, kv_slot_bytes=584, compress_ratios=DSV4_RATIOS, sliding_window=128),
        {"tp": 2, "pp": 2, "kv_cache_dtype": "nvfp4_ds_mla", "max_model_len": 10000},
        [584 * (2 * 10112 + 2500) + 10004 * 8192] * 2 + [584 * (2 * 10112 + 79) + 10008 * 4096] * 2,
    ),
    # pp 2 on a hybrid: kinds are counted, so each stage is sized with its costliest mix: 1 attention
    # and 1 linear layer on one padded page size (2 + 2 pages of 1,015,808 B) beats 2 linear layers
    # unpadded (2 x 2 x 1,000,000): an upper bound.
    (
        "pp2-hybrid",
        gqa(layers=4, kv_heads=2, head_dim=128, num_heads=8, linear_layers=3, linear_state_bytes=1_000_000),
        {"pp": 2, "kv_cache_dtype": "bf16", "max_model_len": 1000},
        [4 * 1_015_808] * 2,
    ),
]


@pytest.mark.parametrize(("arch", "fields", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_kv_min_per_rank(arch: Architecture, fields: dict[str, Any], expected: list[int]) -> None:
    assert kv_of(arch, **fields) == expected


# Each KV dtype on one layer of one 128-wide KV head, 1000 tokens: 2 x 128 x bytes x 1000.
DTYPES = [
    ("auto", 2.0),
    ("bf16", 2.0),
    ("bfloat16", 2.0),
    ("fp16", 2.0),
    ("float16", 2.0),
    ("fp8", 1.0),
    ("fp8_e4m3", 1.0),
    ("fp8_e5m2", 1.0),
    ("nvfp4", 0.5625),
]


@pytest.mark.parametrize(("dtype", "width"), DTYPES)
def test_each_kv_dtype(dtype: str, width: float) -> None:
    arch = gqa(layers=1, kv_heads=1, head_dim=128, num_heads=1)
    assert kv_of(arch, kv_cache_dtype=dtype) == [int(2 * 128 * width * 1000)]


def test_nvfp4_is_fp4_plus_a_scale_per_16() -> None:
    arch = gqa(layers=1, kv_heads=1, head_dim=128, num_heads=1)
    # 128 elements: 64 B of fp4 + 8 B of fp8 scales = 72 B per head per token, K and V: 144.
    assert kv_of(arch, kv_cache_dtype="nvfp4") == [144 * 1000]


def test_ds_mla_layout_on_a_gqa_model_uses_the_element_width() -> None:
    arch = gqa(layers=1, kv_heads=1, head_dim=128, num_heads=1)
    [rank] = budgets(arch, kv_cache_dtype="fp8_ds_mla")
    assert rank.kv_min == 2 * 128 * 1 * 1000
    assert any("MLA layout" in note for note in rank.notes)


def test_need_budget_and_headroom() -> None:
    # 2 ranks, weights 10 GiB / 2; KV 1152 x 8192 x 10 on each; vLLM overhead 6.9 GiB; ceil(0.5 x 100 GiB).
    [r0, r1] = budgets(mla(layers=10), tp=2, kv_cache_dtype="bf16", max_model_len=8192)
    for rank in (r0, r1):
        assert rank.weights == 5 * GIB
        assert rank.kv_min == 1152 * 8192 * 10
        assert rank.overhead == VLLM_OVERHEAD
        assert rank.need == 5 * GIB + 1152 * 8192 * 10 + VLLM_OVERHEAD
        assert rank.budget == UNIT_VISIBLE // 2
        assert rank.headroom == rank.budget - rank.need
        assert rank.capacity == UNIT_VISIBLE
        assert not rank.floor
    assert (r0.host, r1.host) == ("h0", "h1")


def test_weights_split_over_tp_times_pp_not_ep() -> None:
    arch = gqa(layers=4, kv_heads=8, head_dim=128, num_heads=32)
    plain = budgets(arch, tp=2, pp=2)
    with_ep = budgets(arch, tp=2, pp=2, ep=4)
    assert [b.weights for b in plain] == [10 * GIB // 4] * 4
    assert [b.weights for b in with_ep] == [b.weights for b in plain]


def test_min_sequences_multiplies_the_kv() -> None:
    from .builders import with_rule

    policies = with_rule(POLICIES, "memory-budget", params={"min_sequences": 3})
    desired = one_lane_state(
        gqa(layers=2, kv_heads=8, head_dim=64, num_heads=8),
        hardware="unit",
        kv_cache_dtype="bf16",
        gpu_memory_utilization=0.5,
    )
    [rank] = evaluate(desired, policies).budgets
    assert rank.kv_min == 3 * 2048 * 1000 * 2


def test_overhead_per_engine() -> None:
    arch = gqa(layers=1, kv_heads=1, head_dim=128, num_heads=1)
    by_engine = {e: budgets(arch, engine=e)[0].overhead for e in ("sglang", "vllm", "flare", "generic")}
    # rules.yaml overhead_gib: vLLM and SGLang measured on Sparks (its overhead_source), FLARE and generic defaults.
    assert by_engine == {"sglang": 10 * GIB, "vllm": int(6.9 * GIB), "flare": 3 * GIB, "generic": 4 * GIB}


def test_gb10_budget_is_utilization_times_torch_visible() -> None:
    desired = one_lane_state(gqa(layers=1, kv_heads=1, head_dim=128, num_heads=1), gpu_memory_utilization=0.8)
    [rank] = evaluate(desired, repo_policies()).budgets
    torch_visible = int(121.7 * GIB)
    assert rank.capacity == torch_visible
    assert rank.budget == math.ceil(0.8 * torch_visible)  # vllm/v1/worker/utils.py request_memory rounds up
    assert round(rank.budget / GIB, 2) == 97.36
