"""The example fleet's verdicts with the model files rebuilt from public sources (issue 15).

Each model file in state/models/ says where its figures come from. The note's two
verdicts must still come out: GLM-5.3's full lane does not fit comfortably on four
Sparks, MiniMax-M3.1-Flash at TP4 does. Expected figures are worked out here from
the model files' sources, not by calling lanes.
"""

from __future__ import annotations

import pytest

from reconciler.policy import Verdict, evaluate
from reconciler.spec.load import DesiredState

from .builders import GIB, repo_policies, repo_state, with_lanes

pytestmark = pytest.mark.timeout(30)

GLM = "glm53-mxfp4-fp8-4x-r39"
MINIMAX = "minimax-m31-flash-4x-flare"
PRODUCTION = "dsv41-flash-1017-4x-sglang"
NIGHTLY = "eugr-nightly-dsv41-3x"
CONTEXT = 131072  # max_model_len of the GLM, MiniMax and nightly lanes
MARGIN = 10 * GIB  # rules.yaml memory-budget headroom_warn_gib


@pytest.fixture(scope="module")
def desired() -> DesiredState:
    return repo_state("HEAD")


@pytest.fixture(scope="module")
def verdict(desired: DesiredState) -> Verdict:
    return evaluate(desired, repo_policies())


def test_glm_weights_are_the_notes_99_gib_per_rank(verdict: Verdict) -> None:
    for rank in verdict.lane_budgets(GLM):
        assert rank.weights == 99 * GIB  # the note's "99 GiB" per rank, read as weights alone, at TP4


def test_glm_latent_cache_is_glm52s_mla_width(verdict: Verdict) -> None:
    # fp8 latent (kv_lora_rank 512 + qk_rope_head_dim 64) x 1 B x 78 layers x 131072 tokens, whole on every rank.
    for rank in verdict.lane_budgets(GLM):
        assert rank.kv_parts["full"] == 576 * 78 * CONTEXT
        assert rank.kv_min >= 576 * 78 * CONTEXT


# GLM-5.2's config.json (tests/fixtures/model-configs/glm-5.2): index_topk_freq 4, index_skip_topk_offset 3,
# no index_topk_pattern. vLLM 0.33.0 (vllm/models/deepseek_v32/attention.py) builds an Indexer on layer l only
# when max(l - 3 + 1, 0) % 4 == 0: layers 0, 1, 2 and 6, 10, ..., 74, 21 of 78 (indexer_types' "full" ones).
GLM_INDEXER_LAYERS = [layer for layer in range(78) if max(layer - 2, 0) % 4 == 0]


def test_glm_indexer_is_sized_on_the_layers_that_compute_their_own_topk(verdict: Verdict) -> None:
    assert len(GLM_INDEXER_LAYERS) == 21
    # fp8 key 128 B + one fp32 scale = 132 B per token on each of the 21 layers, whole on every rank.
    for rank in verdict.lane_budgets(GLM):
        assert rank.kv_parts["indexer"] == 21 * 132 * CONTEXT
        assert rank.kv_min == (576 * 78 + 21 * 132) * CONTEXT  # 5.82 GiB (6.74 GiB with an indexer on all 78)


def test_glm_full_lane_does_not_fit_comfortably(verdict: Verdict) -> None:
    # Weights and KV alone leave 0.88 x 121.7 - 99 - 5.8 = 2.3 GiB: under the 10 GiB margin whatever
    # the runtime takes, and the runtime takes more than that.
    for rank in verdict.lane_budgets(GLM):
        assert rank.budget - rank.weights - rank.kv_min < MARGIN
        assert rank.headroom < 0
    found = [v for v in verdict.lane_violations(GLM) if v.rule == "memory-budget"]
    assert found and all(v.severity == "warn" and "would be denied when started" in v.message for v in found)


def test_glm_started_in_productions_place_is_denied(desired: DesiredState) -> None:
    lanes = [
        desired.lanes[GLM].model_copy(update={"desired": "running"}),
        desired.lanes[PRODUCTION].model_copy(update={"desired": "stopped"}),
    ]
    verdict = evaluate(with_lanes(desired, *lanes), repo_policies())
    assert GLM in verdict.denied_lanes
    assert any(v.rule == "memory-budget" and v.severity == "deny" for v in verdict.lane_violations(GLM))


def test_minimax_at_tp4_fits(verdict: Verdict) -> None:
    for rank in verdict.lane_budgets(MINIMAX):
        assert rank.weights == 63_100_000_000  # 252.4 GB / 4
        # GQA: 4 KV heads over tp 4 = 1 per rank, K and V, head_dim 128, bf16, 60 layers, 131072 tokens.
        assert rank.kv_min == 2 * 1 * 128 * 2 * 60 * CONTEXT
        assert rank.headroom > MARGIN


def test_nightly_serves_v4_flash_and_fits_three_sparks(verdict: Verdict, desired: DesiredState) -> None:
    assert desired.lanes[NIGHTLY].model == "deepseek-v4-flash"
    ranks = verdict.lane_budgets(NIGHTLY)
    # 160 GB over three pipeline stages, one rank each: the embedding and LM head (129280 x 4096 x 2 B =
    # 1.06 GB each) and the uneven 43-layer split move a stage's share by a few GB, the total stays.
    assert sum(rank.weights for rank in ranks) == pytest.approx(160e9, abs=1e6)
    for rank in ranks:
        assert abs(rank.weights - 160e9 / 3) < 4 * GIB
        assert rank.headroom > MARGIN
    assert verdict.lane_violations(NIGHTLY) == []


@pytest.mark.parametrize(("offloaded", "resident"), [(0, 510e9), (202_752_000_000, 307.248e9)])
def test_the_1017_build_does_not_fit_three_sparks(desired: DesiredState, offloaded: int, resident: float) -> None:
    # Stock vLLM holds the whole 510 GB checkpoint (170 GB per rank); even with the Engram tables streamed from
    # NVMe as production's overlay does, 307.248 GB / 3 = 102.4 GB = 95.4 GiB per rank before KV and runtime,
    # and vLLM's 0.80 x 121.7 = 97.4 GiB cannot also hold its runtime.
    update = {"model": "deepseek-v4.1-flash-1017", "offloaded_weight_bytes": offloaded}
    verdict = evaluate(with_lanes(desired, desired.lanes[NIGHTLY].model_copy(update=update)), repo_policies())
    ranks = verdict.lane_budgets(NIGHTLY)
    assert sum(rank.weights for rank in ranks) == pytest.approx(resident, abs=1e6)
    for rank in ranks:
        assert rank.weights > 90 * GIB
        assert rank.headroom < 0
    assert NIGHTLY in verdict.denied_lanes
