"""The per-rank budget holds each pipeline stage's own weights and KV, as the lane's engine cuts the stages.

Figures by hand: a model of 10 layers, vocab 1000 x hidden 100 x 2 B = 200,000 B
per embedding matrix (E), untied, weight_bytes 10,400,000, so the layers share
10,400,000 - 2E = 10,000,000 B, 1,000,000 B each.
"""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.policy import evaluate

from .builders import gqa, one_lane_state, repo_policies, with_profile

pytestmark = pytest.mark.timeout(30)

POLICIES = with_profile(repo_policies(), "unit", torch_visible_gib=100)
ARCH = gqa(layers=10, kv_heads=8, head_dim=128, num_heads=32, hidden_size=100, vocab_size=1000)
KV_PER_LAYER = 2 * 8 * 128 * 2 * 1000  # K and V, 8 heads x 128, bf16, 1000 tokens


def ranks(**lane: Any) -> list[Any]:
    lane.setdefault("gpu_memory_utilization", 0.5)
    lane.setdefault("kv_cache_dtype", "bf16")
    desired = one_lane_state(ARCH, weight_bytes=10_400_000, hardware="unit", **lane)
    return list(evaluate(desired, POLICIES).budgets)


def test_vllm_stages() -> None:
    # vLLM: 3, 4, 3 layers; the first stage adds E, the last the LM head E.
    got = ranks(pp=3)
    assert [r.weights for r in got] == [3_200_000, 4_000_000, 3_200_000]
    assert [r.kv_min for r in got] == [3 * KV_PER_LAYER, 4 * KV_PER_LAYER, 3 * KV_PER_LAYER]


def test_sglang_stages() -> None:
    # SGLang: 3, 3, 4 layers.
    got = ranks(pp=3, engine="sglang")
    assert [r.weights for r in got] == [3_200_000, 3_000_000, 4_200_000]
    assert [r.kv_min for r in got] == [3 * KV_PER_LAYER, 3 * KV_PER_LAYER, 4 * KV_PER_LAYER]


def test_partition_variable_and_tp() -> None:
    # VLLM_PP_LAYER_PARTITION=2,4,4 at tp 2: stages of 2,200,000, 4,000,000 and 4,200,000 B, halved per rank;
    # ranks 0-1 are stage 0, 2-3 stage 1, 4-5 stage 2.
    got = ranks(pp=3, tp=2, env={"VLLM_PP_LAYER_PARTITION": "2,4,4"})
    assert [r.weights for r in got] == [1_100_000] * 2 + [2_000_000] * 2 + [2_100_000] * 2
    assert any("VLLM_PP_LAYER_PARTITION=2,4,4" in note for note in got[0].notes)


def test_one_stage_keeps_the_plain_split() -> None:
    # pp 1, tp 2: ceil(10,400,000 / 2), embedding or not.
    assert [r.weights for r in ranks(tp=2)] == [5_200_000] * 2
