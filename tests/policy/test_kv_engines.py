"""The KV a rank holds as each engine allocates it: sliding windows, DCP, the indexer, hybrid pages.

Every expected figure is worked out by hand beside the case from the engines'
own formulas (the sources are cited in reconciler/policy/kv.py and
enginekv.py); none is computed by calling the code under test.
"""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.policy.enginekv import KVSettings, kv_settings
from reconciler.policy.kv import DCP_SLIDING, KVModel, KVParams, dcp_sliding_refusal
from reconciler.spec.model import Architecture

from .builders import gqa, lane, mla

pytestmark = pytest.mark.timeout(30)

PARAMS = KVParams(
    dtype_bytes={"auto": 2.0, "bf16": 2.0, "fp8": 1.0},
    slot_bytes={"fp8_ds_mla": 656.0, "nvfp4_ds_mla": 656.0},
)
VLLM = KVSettings(engine="vllm", block_size=16, in_flight_tokens=4096)
SGLANG = KVSettings(engine="sglang")
DSV4_RATIOS = (1.0, 4.0, 128.0, 1.0)


def kv(arch: Architecture, length: int, *, settings: KVSettings, **shape: Any) -> KVModel:
    shape.setdefault("tp", 1)
    shape.setdefault("pp", 1)
    shape.setdefault("dcp", 1)
    shape.setdefault("kv_cache_dtype", "bf16")
    return KVModel(arch, params=PARAMS, settings=settings, **shape)


def swa(**extra: Any) -> Architecture:
    # 2 KV heads x 128 x 2 B, K and V: 2 x 2 x 128 x 2 = 1024 B per token per layer at tp 1.
    return gqa(layers=4, kv_heads=2, head_dim=128, num_heads=8, sliding_window=256, sliding_window_layers=3, **extra)


# -- sliding-window layers ------------------------------------------------------------


def test_vllm_sliding_layer_reserves_the_window_plus_in_flight_plus_a_block() -> None:
    # 100,000 tokens: min(256 - 1 + 4096, 100,000) = 4351; cdiv(4351, 16) = 272 blocks, + 1 = 273 blocks
    # = 4368 tokens x 1024 B = 4,472,832 B per sliding layer; the full layer keeps 100,000 x 1024.
    model = kv(swa(), 100_000, settings=VLLM)
    stage = model.stage(0, 100_000)
    assert stage.parts == {"full": 100_000 * 1024, "sliding": 3 * 4_472_832}
    # The window alone (the old figure) was 256 x 1024 = 262,144 per layer.
    assert stage.parts["sliding"] != 3 * 256 * 1024


def test_vllm_sliding_layer_at_short_context_is_bounded_by_max_model_len() -> None:
    # 1000 tokens: min(4351, 1000) = 1000; cdiv(1000, 16) = 63 blocks, + 1 = 64 = 1024 tokens x 1024 B.
    stage = kv(swa(), 1000, settings=VLLM).stage(0, 1000)
    assert stage.total == 1000 * 1024 + 3 * 1024 * 1024


def test_sliding_window_is_not_split_by_dcp() -> None:
    # SGLang keeps min(1000, 256) = 256 tokens per sliding layer whatever dcp says; tp 2 leaves one KV head
    # (512 B/token); dcp 2 splits the full layer only: ceil(1000 / 2) = 500 tokens.
    stage = kv(swa(), 1000, settings=SGLANG, tp=2, dcp=2).stage(0, 1000)
    assert stage.parts == {"full": 512 * 500, "sliding": 3 * 512 * 256}


def test_vllm_refuses_dcp_with_sliding_window_layers() -> None:
    model = kv(swa(), 1000, settings=VLLM, tp=2, dcp=2)
    assert [r.code for r in model.refusals] == [DCP_SLIDING]
    assert "dcp 2" in model.refusals[0].message
    assert "kv_cache_interface.py" in model.refusals[0].source


@pytest.mark.parametrize(
    ("arch", "settings", "dcp"),
    [
        (swa(), VLLM, 1),  # no DCP
        (swa(), SGLANG, 2),  # not vLLM's assertion
        (gqa(layers=4, kv_heads=2, head_dim=128, num_heads=8), VLLM, 2),  # no sliding layers
    ],
)
def test_no_dcp_refusal(arch: Architecture, settings: KVSettings, dcp: int) -> None:
    assert kv(arch, 1000, settings=settings, tp=2, dcp=dcp).refusals == []


def test_layer_types_place_sliding_layers_on_their_stage() -> None:
    # layer_types full, sliding, sliding, sliding over pp 2 (vLLM: 2 and 2): stage 0 holds the full layer
    # and one sliding layer, stage 1 two sliding layers. 1000 tokens: sliding = 1024 tokens (as above).
    arch = gqa(
        layers=4,
        kv_heads=2,
        head_dim=128,
        num_heads=8,
        sliding_window=256,
        layer_types=("full", "sliding", "sliding", "sliding"),
    )
    model = kv(arch, 1000, settings=VLLM, pp=2)
    assert model.stage(0, 1000).total == 1000 * 1024 + 1024 * 1024
    assert model.stage(1, 1000).total == 2 * 1024 * 1024


# -- the sparse-attention indexer -------------------------------------------------------


def test_indexer_key_carries_its_fp32_scale() -> None:
    # MLA fp8: (512 + 64) x 1 B = 576 B; indexer: 128 fp8 + 128 / 128 x 4 B scale = 132 B;
    # 2 layers x 1000 tokens: (576 + 132) x 1000 x 2 = 1,416,000.
    arch = mla(layers=2, index_head_dim=128)
    stage = kv(arch, 1000, settings=SGLANG, kv_cache_dtype="fp8").stage(0, 1000)
    assert stage.parts == {"full": 576 * 1000 * 2, "indexer": 132 * 1000 * 2}


def test_mxfp4_indexer_key() -> None:
    # index_dtype_bytes 0.5: 128 / 2 = 64 B of values + 128 / 32 = 4 UE8M0 scale bytes = 68 B per token.
    arch = mla(layers=1, index_head_dim=128, index_dtype_bytes=0.5)
    stage = kv(arch, 1000, settings=SGLANG, kv_cache_dtype="fp8").stage(0, 1000)
    assert stage.parts["indexer"] == 68 * 1000


def dsv4(**extra: Any) -> Architecture:
    return mla(
        layers=4,
        kv_lora_rank=448,
        kv_slot_bytes=584,
        compress_ratios=DSV4_RATIOS,
        sliding_window=128,
        index_head_dim=128,
        **extra,
    )


def test_dsv4_indexer_only_on_ratio_4_layers() -> None:
    # SGLang-style sizing (window only): ratios 1, 4, 128, 1 at 10,000 tokens: 128 + 2500 + 79 + 128 slots
    # of 584 B; the indexer sits on the ratio-4 layer only: 132 x 2500 = 330,000.
    stage = kv(dsv4(), 10_000, settings=SGLANG, kv_cache_dtype="fp8_ds_mla").stage(0, 10_000)
    assert stage.total == 584 * (128 + 2500 + 79 + 128) + 132 * 2500


def test_dsv4_on_vllm_keeps_a_window_on_every_layer() -> None:
    # nvfp4_ds_mla: vLLM aligns pages to 576 B only for fp8_ds_mla, so here bytes are per row.
    # vLLM builds a DeepseekV4SWACache on every layer; 64-token blocks, 4096 in flight:
    # min(128 - 1 + 4096, 10,000) = 4223; cdiv(4223, 64) = 66, + 1 = 67 blocks = 4288 tokens x 584 B per layer,
    # on all 4 layers; plus the compressed slots 584 x (2500 + 79) and the indexer 132 x 2500.
    # Compressor states (fp32 sliding windows, head 448 + 64 = 512):
    #   r=4: window 2 x 4 = 8, blocks of 4: min(7 + 4096, 10,000) = 4103, cdiv(4103, 4) = 1026 + 1 = 1027 blocks
    #        = 4108 rows x (2 x 2 x 512 x 4 = 8192 B) = 33,652,736, and the indexer's own compressor
    #        4108 rows x (2 x 2 x 128 x 4 = 2048 B) = 8,413,184;
    #   r=128: window 128, blocks of 8: min(127 + 4096, 10,000) = 4223, cdiv(4223, 8) = 528 + 1 = 529 blocks
    #        = 4232 rows x (2 x 1 x 512 x 4 = 4096 B) = 17,334,272.
    settings = KVSettings(engine="vllm", block_size=64, in_flight_tokens=4096)
    stage = kv(dsv4(), 10_000, settings=settings, kv_cache_dtype="nvfp4_ds_mla").stage(0, 10_000)
    assert stage.parts == {
        "sliding": 4 * 4288 * 584,
        "compressed": 584 * (2500 + 79),
        "indexer": 132 * 2500,
        "compressor": 33_652_736 + 8_413_184 + 17_334_272,
    }
    assert stage.total == 11_852_904 + 59_400_192


def test_dsv4_on_vllm_with_fp8_ds_mla_pays_whole_padded_pages() -> None:
    # fp8_ds_mla: every page aligned to 576 B, three buckets each paying its largest page
    # (reconciler/policy/dsv4pages.py): c4 KV 64 x 584 = 37,376 -> 37,440, SWA the same, compressor
    # states 4 x 8192 = 8 x 4096 = 32,768 -> 33,408, so the large page is 37,440; indexer KV
    # 64 x 132 = 8,448 -> 8,640 and its compressor 4 x 2048 = 8,192 -> 8,640; c128 KV 2 x 584 = 1,168
    # -> 1,728: vLLM's DeepSeek V4 post gives the same 1,728 / 8,640 / 37,440 B.
    # At 10,000 tokens (4096 in flight, the rows and blocks of the case above):
    #   sliding 67 blocks x 37,440 on 4 layers; compressed cdiv(10,000, 256) = 40 blocks x 37,440 (r=4)
    #   and x 1,728 (r=128); indexer 40 x 8,640; compressor r=4 1027 blocks x (37,440 + 8,640),
    #   r=128 529 blocks x 37,440.
    settings = KVSettings(engine="vllm", block_size=64, in_flight_tokens=4096)
    stage = kv(dsv4(), 10_000, settings=settings, kv_cache_dtype="fp8_ds_mla").stage(0, 10_000)
    assert stage.parts == {
        "sliding": 4 * 67 * 37_440,
        "compressed": 40 * 37_440 + 40 * 1_728,
        "indexer": 40 * 8_640,
        "compressor": 1027 * (37_440 + 8_640) + 529 * 37_440,
    }


def test_dsv4_dcp_is_refused_on_vllm() -> None:
    settings = KVSettings(engine="vllm", block_size=64, in_flight_tokens=4096)
    model = kv(dsv4(), 10_000, settings=settings, tp=2, dcp=2, kv_cache_dtype="fp8_ds_mla")
    assert [r.code for r in model.refusals] == [DCP_SLIDING]


# -- hybrid attention + linear attention: vLLM's one page size ----------------------------------

HYBRID_VLLM = KVSettings(engine="vllm", block_size=16, linear_blocks=2, unify_pages=True)


def hybrid(layer_types: tuple[str, ...] | None = ("linear", "linear", "linear", "full"), **extra: Any) -> Architecture:
    fields: dict[str, Any] = {"linear_state_bytes": 1_000_000}
    if layer_types is None:
        fields["linear_layers"] = 3
    else:
        fields["layer_types"] = layer_types
    fields.update(extra)
    return gqa(layers=len(layer_types or "xxxx"), kv_heads=2, head_dim=128, num_heads=8, **fields)


@pytest.mark.parametrize("layer_types", [("linear", "linear", "linear", "full"), None])
def test_vllm_hybrid_pages(layer_types: tuple[str, ...] | None) -> None:
    # Attention: 1024 B per token per layer; linear state 1,000,000 B per layer and sequence.
    # Block: 16 x cdiv(1,000,000, 16 x 1024) = 16 x 62 = 992 tokens (61 x 16,384 = 999,424 is too small);
    # page = 992 x 1024 = 1,015,808 B, the state padded up to it.
    # Groups: 1 full layer, 3 linear: group size 1 (3 >= 1.5 x 1), so 1 full group and 3 linear groups.
    # 1000 tokens: cdiv(1000, 992) = 2 blocks for the full group: 2 x 1,015,808 = 2,031,616;
    # linear: 3 groups x 2 state blocks (prefix caching on) x 1,015,808 = 6,094,848. Total 8,126,464,
    # where the per-layer sum is 1000 x 1024 + 3 x 1,000,000 = 4,024,000.
    stage = kv(hybrid(layer_types), 1000, settings=HYBRID_VLLM).stage(0, 1000)
    assert stage.parts == {"full": 2_031_616, "linear": 6_094_848}
    assert stage.total == 8_126_464


def test_vllm_hybrid_with_prefix_caching_off_keeps_one_state_block() -> None:
    # As above with 1 state block: 2,031,616 + 3 x 1,015,808 = 5,079,040.
    settings = KVSettings(engine="vllm", block_size=16, linear_blocks=1, unify_pages=True)
    assert kv(hybrid(), 1000, settings=settings).stage(0, 1000).total == 5_079_040


def test_vllm_hybrid_pads_groups_to_equal_size() -> None:
    # 3 linear and 2 full layers: group size 2 (3 is not under 1.5 x 2), so linear needs cdiv(3, 2) = 2 groups,
    # one of them half padding. Page 1,015,808 as above.
    #   full: 1 group x 2 layers x 2 blocks x 1,015,808 = 4,063,232
    #   linear: 2 groups x 2 layers x 2 state blocks x 1,015,808 = 8,126,464
    arch = hybrid(("linear", "full", "linear", "full", "linear"))
    stage = kv(arch, 1000, settings=HYBRID_VLLM).stage(0, 1000)
    assert stage.parts == {"full": 4_063_232, "linear": 8_126_464}


def test_vllm_hybrid_at_tp2() -> None:
    # tp 2: one KV head, 512 B per token; state ceil(1,000,000 / 2) = 500,000.
    # Block 16 x cdiv(500,000, 16 x 512 = 8192) = 16 x 62 = 992; page = 992 x 512 = 507,904.
    # full: 2 blocks x 507,904 = 1,015,808; linear: 3 x 2 x 507,904 = 3,047,424.
    stage = kv(hybrid(), 1000, settings=HYBRID_VLLM, tp=2).stage(0, 1000)
    assert stage.total == 1_015_808 + 3_047_424


def test_other_engines_keep_the_plain_linear_state() -> None:
    # SGLang keeps its own mamba pool: 1000 x 1024 + 3 x 1,000,000.
    assert kv(hybrid(), 1000, settings=SGLANG).stage(0, 1000).total == 4_024_000


def test_counted_hybrid_stage_is_sized_with_its_costliest_mix() -> None:
    # Counted (not placed) 1 full + 3 linear over pp 2, 2 layers a stage. Candidates per stage:
    #   2 linear: no attention beside them, no padding: 2 x 2 blocks x 1,000,000 = 4,000,000;
    #   1 linear + 1 full: padded, as above: 2 x 1,015,808 + 2 x 1,015,808 = 4,063,232 (the larger).
    model = kv(hybrid(None), 1000, settings=HYBRID_VLLM, pp=2)
    assert [model.stage(s, 1000).total for s in (0, 1)] == [4_063_232, 4_063_232]


# -- pipeline stages in the KV -------------------------------------------------------------------


def test_kv_follows_the_engine_partition() -> None:
    # 10 layers of 2 x 8 x 128 x 2 = 4096 B per token, 1000 tokens; vLLM 3, 4, 3; SGLang 3, 3, 4.
    arch = gqa(layers=10, kv_heads=8, head_dim=128, num_heads=32)
    vllm = kv(arch, 1000, settings=VLLM, pp=3, partition=(3, 4, 3))
    sglang = kv(arch, 1000, settings=SGLANG, pp=3, partition=(3, 3, 4))
    assert [vllm.stage(s, 1000).total for s in range(3)] == [4096 * 1000 * n for n in (3, 4, 3)]
    assert [sglang.stage(s, 1000).total for s in range(3)] == [4096 * 1000 * n for n in (3, 3, 4)]


def test_default_partition_is_vllms() -> None:
    arch = gqa(layers=10, kv_heads=8, head_dim=128, num_heads=32)
    model = KVModel(arch, tp=1, pp=3, dcp=1, kv_cache_dtype="bf16", params=PARAMS)
    assert model.sizes == [3, 4, 3]


def test_a_partition_that_does_not_cut_the_model_is_an_error() -> None:
    arch = gqa(layers=10, kv_heads=8, head_dim=128, num_heads=32)
    with pytest.raises(ValueError, match="partition"):
        kv(arch, 1000, settings=VLLM, pp=3, partition=(3, 3, 3))


# -- the engine figures read off the lane ------------------------------------------------------


def _lane(**fields: Any) -> Any:
    fields.setdefault("engine_version", "0.33.0")
    return lane("l", "m", [f"h{i}" for i in range(fields.get("tp", 1) * fields.get("pp", 1))], **fields)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        # 0.33.0 on a GB10: 2048 batched tokens (min with max_num_seqs 8 x 1000 = 8000), x 2 async batches.
        ({}, 2048 * 2),
        # 0.32.0: the >= 70 GiB tier, 8192, capped at 8 x 1000 = 8000; x 2.
        ({"engine_version": "0.32.0"}, 8000 * 2),
        # A fork's version string: 0.26.1rc0 is past 0.26.0 (in-flight) and before 0.33.0 (GB10 tier).
        ({"engine_version": "0.26.1rc0+glm53.r39.vllm9e5d1793", "max_model_len": 100_000}, 8192 * 2),
        # 0.25.1: no in-flight factor yet; 8192 capped at 8000.
        ({"engine_version": "0.25.1"}, 8000),
        # The lane's own --max-num-batched-tokens; pp 2 runs pp + 1 = 3 batches on the V2 runner.
        ({"args": ("--max-num-batched-tokens", "512"), "pp": 2}, 512 * 3),
        # Without async scheduling, pp batches.
        ({"args": ("--max-num-batched-tokens=512", "--no-async-scheduling"), "pp": 2}, 512 * 2),
        # Throughput mode doubles the default: 4096, under 8 x 1000.
        ({"args": ("--performance-mode", "throughput")}, 4096 * 2),
        # Chunked prefill off: at least max_model_len (5000 > 2048), under 8 x 5000.
        ({"args": ("--no-enable-chunked-prefill",), "max_model_len": 5000}, 5000 * 2),
        # One sequence of 1000 tokens caps the default: min(1 x 1000, 2048) = 1000.
        ({"max_num_seqs": 1}, 1000 * 2),
    ],
)
def test_vllm_in_flight_tokens(fields: dict[str, Any], expected: int) -> None:
    settings = kv_settings(_lane(**fields), swa())
    assert settings.in_flight_tokens == expected


def test_block_size_and_state_blocks() -> None:
    assert kv_settings(_lane(), swa()).block_size == 16
    assert kv_settings(_lane(), dsv4()).block_size == 64
    assert kv_settings(_lane(args=("--block-size", "32")), swa()).block_size == 32
    on = kv_settings(_lane(), hybrid())
    assert (on.linear_blocks, on.unify_pages) == (2, True)
    off = kv_settings(_lane(args=("--no-enable-prefix-caching",)), hybrid())
    assert off.linear_blocks == 1


def test_other_engines_get_no_vllm_figures() -> None:
    settings = kv_settings(_lane(engine="sglang"), swa())
    assert settings.in_flight_tokens is None
    assert not settings.unify_pages


def test_layer_types_must_describe_every_layer() -> None:
    with pytest.raises(ValueError, match="layer_types has 3 entries"):
        gqa(layers=4, layer_types=("full", "full", "full"))
    with pytest.raises(ValueError, match="linear_state_bytes"):
        gqa(layers=2, layer_types=("full", "linear"))


def test_qwen35_35b_a3b_on_vllm() -> None:
    # Qwen/Qwen3.5-35B-A3B (tests/fixtures/model-configs/qwen3.5-35b-a3b/config.json): 40 layers, every
    # 4th full attention (10 full, 30 gated delta net), 2 KV heads x 256, mamba_ssm_dtype float32.
    # Attention: 2 x 2 x 256 x 2 B = 2048 B per token per layer (bf16, tp 1).
    # Linear state: conv (4 - 1) x (2 x 16 x 128 + 32 x 128 = 8192) x 2 B = 49,152
    #             + temporal 32 x 128 x 128 x 4 B = 2,097,152  -> 2,146,304 B per layer and sequence.
    # vLLM: block 16 x cdiv(2,146,304, 16 x 2048 = 32,768) = 16 x 66 = 1056 tokens; page 1056 x 2048 = 2,162,688.
    # Groups of 10 layers: 1 attention group, 3 linear groups. 32,768 tokens: cdiv(32768, 1056) = 32 blocks;
    # linear 3 x 2 blocks; 38 blocks x 10 layers x 2,162,688 B = 821,821,440 B for one sequence,
    # against the per-layer sum 10 x 2048 x 32,768 + 30 x 2,146,304 = 735,477,760 (x 1.117).
    layer_types = ("linear", "linear", "linear", "full") * 10
    arch = gqa(layers=40, kv_heads=2, head_dim=256, num_heads=16, layer_types=layer_types, linear_state_bytes=2_146_304)
    stage = kv(arch, 32_768, settings=HYBRID_VLLM).stage(0, 32_768)
    assert stage.total == 821_821_440
    assert kv(arch, 32_768, settings=SGLANG).stage(0, 32_768).total == 735_477_760


@pytest.mark.parametrize(
    ("fields", "refused"),
    [
        ({"sliding_window": 256, "layer_types": ("full", "sliding")}, True),
        ({"sliding_window": 256, "layer_types": ("full", "full"), "sliding_window_layers": 1}, False),
        ({"layer_types": ("full", "sliding")}, False),  # no window: sized as full layers, nothing to refuse
        ({"sliding_window": 256, "sliding_window_layers": 1}, True),
    ],
)
def test_dcp_sliding_refusal_without_building_the_kv(fields: dict[str, Any], refused: bool) -> None:
    arch = gqa(layers=2, kv_heads=2, head_dim=128, num_heads=8, **fields)
    assert (dcp_sliding_refusal(arch, "vllm", 2) is not None) == refused
    assert dcp_sliding_refusal(arch, "vllm", 1) is None
    assert dcp_sliding_refusal(arch, "sglang", 2) is None
