"""Pipeline stages as vLLM and SGLang cut them, and the weights each stage holds.

Every expected figure is worked out by hand beside the case, from the
engines' own split rules (vllm/distributed/utils.py and
sglang/srt/distributed/utils.py get_pp_indices).
"""

from __future__ import annotations

import pytest

from reconciler.policy.stages import (
    Partition,
    pp_partition,
    sglang_split,
    stage_weights,
    vllm_split,
    weights_per_stage_rank,
)
from reconciler.spec.model import ModelSpec

from .builders import gqa, model

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    ("layers", "pp", "expected"),
    [
        # 10 // 3 = 3 each, 1 left over: vLLM adds it to partitions[-2], the stage before the last.
        (10, 3, (3, 4, 3)),
        # 11 // 4 = 2 each, 3 left over: partitions[-2], [-3], [-4] get one each; the last never does.
        (11, 4, (3, 3, 3, 2)),
        # 43 // 4 = 10, 3 left over (the DeepSeek V4 Flash depth on four Sparks).
        (43, 4, (11, 11, 11, 10)),
        # 9 // 4 = 2, 1 left over: the stage before the last.
        (9, 4, (2, 2, 3, 2)),
        (8, 4, (2, 2, 2, 2)),
        (7, 1, (7,)),
    ],
)
def test_vllm_split(layers: int, pp: int, expected: tuple[int, ...]) -> None:
    assert vllm_split(layers, pp) == expected
    assert pp_partition(layers, pp, "vllm").sizes == expected


@pytest.mark.parametrize(
    ("layers", "pp", "expected"),
    [
        # SGLang: the last (layers % pp) stages take one more.
        (10, 3, (3, 3, 4)),
        (11, 4, (2, 3, 3, 3)),
        (43, 4, (10, 11, 11, 11)),
        (8, 4, (2, 2, 2, 2)),
    ],
)
def test_sglang_split(layers: int, pp: int, expected: tuple[int, ...]) -> None:
    assert sglang_split(layers, pp) == expected
    assert pp_partition(layers, pp, "sglang").sizes == expected


def test_partition_variable_of_the_engine_wins() -> None:
    env = {"VLLM_PP_LAYER_PARTITION": "2,4,4", "SGLANG_PP_LAYER_PARTITION": "5,3,2"}
    vllm = pp_partition(10, 3, "vllm", env)
    assert vllm.sizes == (2, 4, 4)
    assert vllm.note is not None
    assert "VLLM_PP_LAYER_PARTITION" in vllm.note
    assert pp_partition(10, 3, "sglang", env).sizes == (5, 3, 2)


@pytest.mark.parametrize("text", ["3,3", "3,3,3", "a,b,c"])
def test_a_partition_the_engine_refuses_is_reported_and_the_default_used(text: str) -> None:
    part = pp_partition(10, 3, "vllm", {"VLLM_PP_LAYER_PARTITION": text})
    assert part.sizes == (3, 4, 3)
    assert part.note is not None
    assert "refuses" in part.note


def test_other_engines_are_cut_as_vllm_with_a_note() -> None:
    part = pp_partition(10, 3, "flare")
    assert part.sizes == (3, 4, 3)
    assert part.note is not None


def test_ranges() -> None:
    assert Partition(sizes=(3, 4, 3)).ranges() == [(0, 3), (3, 7), (7, 10)]


# A model of 10 layers, vocab 1000 x hidden 100 x 2 B (bf16): E = 200,000 B per embedding matrix.
EMBED = 1000 * 100 * 2


def _model(weight_bytes: int, tied: bool = False, vocab: int | None = 1000) -> ModelSpec:
    arch = gqa(layers=10, kv_heads=8, head_dim=128, num_heads=32, hidden_size=100, vocab_size=vocab)
    arch = arch.model_copy(update={"tie_word_embeddings": tied})
    return model("m", arch=arch, weight_bytes=weight_bytes)


def test_untied_embedding_first_and_head_last() -> None:
    # Untied: the checkpoint holds E (embedding) + E (head) + body; body = 10,400,000 - 400,000 = 10,000,000,
    # 1,000,000 B per layer. vLLM cuts 10 layers over 3 stages as 3, 4, 3:
    #   stage 0: 3 x 1,000,000 + E = 3,200,000; stage 1: 4,000,000; stage 2: 3 x 1,000,000 + E = 3,200,000.
    m = _model(10_400_000)
    placed = stage_weights(m, pp_partition(10, 3, "vllm"))
    assert placed.stages == (3_200_000, 4_000_000, 3_200_000)
    assert placed.embedding == EMBED
    # Per rank at tp 2: halves.
    assert weights_per_stage_rank(m, (3, 4, 3), 2) == (1_600_000, 2_000_000, 1_600_000)
    # The old even split gave every rank ceil(10,400,000 / 6) = 1,733,334.
    assert weights_per_stage_rank(m, (3, 4, 3), 2)[1] != 1_733_334


def test_tied_head_is_a_copy_on_the_last_stage() -> None:
    # Tied: the checkpoint holds E once; body = 10,200,000 - 200,000 = 10,000,000. The last stage builds
    # its own copy for the head, so the stages hold 10,400,000 B in all, E more than the checkpoint.
    m = _model(10_200_000, tied=True)
    placed = stage_weights(m, pp_partition(10, 3, "sglang"))
    # SGLang cuts 3, 3, 4: 3,000,000 + E; 3,000,000; 4,000,000 + E.
    assert placed.stages == (3_200_000, 3_000_000, 4_200_000)
    assert sum(placed.stages) == 10_200_000 + EMBED


@pytest.mark.parametrize("tied", [False, True])
def test_one_stage_holds_the_checkpoint_as_it_is(tied: bool) -> None:
    weight = 10_400_000 if not tied else 10_200_000
    m = _model(weight, tied=tied)
    assert stage_weights(m, pp_partition(10, 1, "vllm")).stages == (weight,)
    # tp 4: ceil(10,400,000 / 4) = 2,600,000; ceil(10,200,000 / 4) = 2,550,000.
    assert weights_per_stage_rank(m, (10,), 4) == (weight // 4,)


def test_without_vocab_the_weights_follow_the_layers() -> None:
    # No vocab_size: 10,000,000 B over 10 layers, 1,000,000 each, cut 3, 4, 3.
    m = _model(10_000_000, vocab=None)
    placed = stage_weights(m, pp_partition(10, 3, "vllm"))
    assert placed.stages == (3_000_000, 4_000_000, 3_000_000)
    assert placed.embedding == 0
    assert any("vocab_size" in note for note in placed.notes)


def test_offloaded_weights_leave_the_layers_not_the_embeddings() -> None:
    # 1,000,000 B of experts stay off the GPU: body 9,000,000, 900,000 per layer; stages 3, 4, 3 (vLLM).
    #   stage 0: 2,700,000 + E = 2,900,000; stage 1: 3,600,000; stage 2: 2,700,000 + E = 2,900,000.
    m = _model(10_400_000)
    placed = stage_weights(m, pp_partition(10, 3, "vllm"), offloaded=1_000_000)
    assert placed.stages == (2_900_000, 3_600_000, 2_900_000)


def test_embedding_larger_than_the_checkpoint_is_not_placed() -> None:
    m = _model(300_000)  # 2E = 400,000 > 300,000: the figures disagree, spread evenly
    placed = stage_weights(m, pp_partition(10, 1, "vllm"))
    assert placed.stages == (300_000,)
    assert placed.notes
