"""`lanes model describe` on real config.json files (tests/fixtures/model-configs/, each with its source).

The expected figures are read off each config by hand (the comment says which keys), so a
reader change that misreads a published config fails here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reconciler.policy.kv import KVModel, KVParams
from reconciler.spec.checkpoint import model_from_checkpoint, render_model_yaml
from reconciler.spec.load import load_desired
from reconciler.spec.model import ModelSpec

pytestmark = pytest.mark.timeout(30)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "model-configs"

EXPECTED: dict[str, dict[str, Any]] = {
    # num_hidden_layers 80, num_key_value_heads 8, head_dim = hidden_size 8192 / num_attention_heads 64
    "llama-3.1-70b": {"layers": 80, "attention": "gqa", "kv_heads": 8, "head_dim": 128, "vocab_size": 128256},
    "qwen3-32b": {"layers": 64, "attention": "gqa", "kv_heads": 8, "head_dim": 128},
    # kv_lora_rank 512 + qk_rope_head_dim 64
    "deepseek-v3": {"layers": 61, "attention": "mla", "kv_lora_rank": 512, "rope_dim": 64, "index_head_dim": None},
    "deepseek-v3.2": {"layers": 61, "attention": "mla", "kv_lora_rank": 512, "index_head_dim": 128},
    # head_dim 512 holds the 64-wide RoPE part: latent 448; compress_ratios cut from 44 to 43 entries
    "deepseek-v4-flash": {
        "layers": 43,
        "attention": "mla",
        "kv_lora_rank": 448,
        "rope_dim": 64,
        "kv_slot_bytes": 584,
        "sliding_window": 128,
        "index_head_dim": 128,
    },
    "glm-5.2": {"layers": 78, "attention": "mla", "kv_lora_rank": 512, "index_head_dim": 128, "vocab_size": 154880},
    # layer_types alternate sliding_attention / full_attention over 36 layers, window 128
    "gpt-oss-120b": {
        "layers": 36,
        "attention": "gqa",
        "kv_heads": 8,
        "head_dim": 64,
        "sliding_window": 128,
        "sliding_window_layers": 18,
    },
    "qwen3-235b-a22b": {"layers": 94, "attention": "gqa", "kv_heads": 4, "head_dim": 128},
    "minimax-m2.5": {"layers": 62, "attention": "gqa", "kv_heads": 8, "head_dim": 128},
    # M2.7 keeps M2.5's attention: 62 layers of 8 KV heads x head_dim 128 (attn_type_list all 1)
    "minimax-m2.7": {"layers": 62, "attention": "gqa", "kv_heads": 8, "head_dim": 128},
    "minimax-m3": {"layers": 60, "attention": "gqa", "kv_heads": 4, "head_dim": 128, "hidden_size": 6144},
    # hybrid_override_pattern: 8 attention layers ("*") of 2 KV heads x 128 among 88, 40 Mamba-2 ("M"), 40 MoE;
    # Mamba-2 state per sequence per layer: 3 x (128 x 64 + 2 x 8 x 128) x 2 B conv + 128 x 64 x 128 x 4 B SSM
    "nemotron-3-super-120b-a12b": {
        "layers": 88,
        "attention": "gqa",
        "kv_heads": 2,
        "head_dim": 128,
        "linear_layers": 40,
        "linear_state_bytes": 61_440 + 4_194_304,
    },
    # full_attention_interval 4 over 48 layers: 36 gated delta-net layers
    "qwen3-next-80b-a3b": {"layers": 48, "attention": "gqa", "kv_heads": 2, "head_dim": 256, "linear_layers": 36},
    # text_config: 40 layers, layer_types 3 linear_attention + 1 full_attention
    "qwen3.5-35b-a3b": {"layers": 40, "attention": "gqa", "kv_heads": 2, "head_dim": 256, "linear_layers": 30},
}
MOE = {
    "deepseek-v3": (256, 8),
    "deepseek-v4-flash": (256, 6),
    "glm-5.2": (256, 8),
    "gpt-oss-120b": (128, 4),
    "qwen3-235b-a22b": (128, 8),
    "minimax-m2.5": (256, 8),
    "minimax-m2.7": (256, 8),
    "minimax-m3": (128, 4),
    "qwen3-next-80b-a3b": (512, 10),
    "nemotron-3-super-120b-a12b": (512, 22),
}
"""(routed experts, experts per token): n_routed_experts / num_experts / num_local_experts, num_experts_per_tok."""


def described(slug: str) -> tuple[ModelSpec, list[str]]:
    config = json.loads((FIXTURES / slug / "config.json").read_text())
    index = {"metadata": {"total_size": 1_000_000_000}}
    name = slug.replace(".", "-")
    return model_from_checkpoint(config, index, name=name, path=f"/models/{name}", file_bytes_total=None)


def test_every_fixture_has_its_source() -> None:
    folders = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
    assert folders == sorted(EXPECTED)
    for slug in folders:
        source = (FIXTURES / slug / "source.yaml").read_text()
        assert "config_source:" in source and "commit: " in source and "weight_source:" in source


@pytest.mark.parametrize("slug", sorted(EXPECTED))
def test_describe_reads_the_published_config(slug: str) -> None:
    spec, notes = described(slug)
    arch = spec.architecture
    for key, want in EXPECTED[slug].items():
        assert getattr(arch, key) == want, key
    experts = (spec.moe.experts, spec.moe.experts_per_token) if spec.moe else None
    if slug in MOE:
        assert experts == MOE[slug]
    text = render_model_yaml(spec, notes)
    files = {"state/fleet.yaml": b"", f"state/models/{spec.name}.yaml": text.encode()}
    assert load_desired(files, "test").models[spec.name] == spec


def test_hybrid_layers_are_placed_where_the_config_puts_them() -> None:
    spec, _ = described("qwen3.5-35b-a3b")
    kinds = spec.architecture.layer_types
    assert kinds is not None
    assert [i for i, kind in enumerate(kinds) if kind == "full"] == list(range(3, 40, 4))
    spec, _ = described("gpt-oss-120b")
    assert spec.architecture.layer_types == ("sliding", "full") * 18


def test_nemotron_h_pattern_places_attention_mamba_and_moe_layers() -> None:
    # Nemotron-H has no layer_types: hybrid_override_pattern says each layer's kind, and only the
    # "*" layers keep a KV cache (vLLM's nemotron_h.py); sized as 88 attention layers before.
    spec, notes = described("nemotron-3-super-120b-a12b")
    kinds = spec.architecture.layer_types
    assert kinds is not None
    assert [i for i, kind in enumerate(kinds) if kind == "full"] == [7, 16, 25, 36, 47, 58, 69, 78]
    assert kinds.count("linear") == 40 and kinds.count("none") == 40
    assert "hybrid_override_pattern: 8 attention, 40 Mamba-2 and 40 MoE/MLP layers (no cache)" in notes
    params = KVParams(dtype_bytes={"fp8": 1.0}, slot_bytes={})
    kv = KVModel(spec.architecture, tp=1, pp=1, dcp=1, kv_cache_dtype="fp8", params=params)
    one = kv.stage(0, 131_072)
    assert one.layers == 48
    # 8 layers x 2 x 2 KV heads x 128 x 1 B (fp8) per token, plus 40 Mamba-2 states for the one sequence
    assert one.parts["full"] == 8 * 2 * 2 * 128 * 131_072
    assert one.parts["linear"] == 40 * (61_440 + 4_194_304)


def test_glm52s_indexer_layers_are_the_ones_vllm_builds_an_indexer_on() -> None:
    # GLM-5.2: index_topk_freq 4, index_skip_topk_offset 3, no index_topk_pattern. vLLM 0.33.0
    # (vllm/models/deepseek_v32/attention.py) skips the top-k on layer l unless max(l - 3 + 1, 0) % 4 == 0.
    spec, notes = described("glm-5.2")
    expected = (0, 1, 2, *range(6, 78, 4))
    assert spec.architecture.indexer_layers == expected
    assert len(expected) == 21
    # The config's own indexer_types (which SGLang 0.5.23 reads first) marks the same layers "full".
    config = json.loads((FIXTURES / "glm-5.2" / "config.json").read_text())
    assert tuple(i for i, kind in enumerate(config["indexer_types"]) if kind == "full") == expected
    assert "indexer cache on 21 of 78 layers (the ones that compute their own top-k)" in notes


@pytest.mark.parametrize("slug", ["deepseek-v3.2", "deepseek-v4-flash"])
def test_models_whose_every_layer_computes_its_topk_list_no_indexer_layers(slug: str) -> None:
    assert described(slug)[0].architecture.indexer_layers is None
