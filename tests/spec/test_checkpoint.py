"""`lanes model describe`: model files from small checkpoint folders the tests write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reconciler.errors import InputError
from reconciler.spec.checkpoint import model_from_checkpoint, render_model_yaml
from reconciler.spec.load import load_desired
from reconciler.spec.model import ModelSpec

pytestmark = pytest.mark.timeout(30)


def write_checkpoint(folder: Path, config: dict[str, Any], total_size: int | None = 100_000_000_000) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    index: dict[str, Any] = {"weight_map": {"a.weight": "model-00001-of-00002.safetensors"}}
    if total_size is not None:
        index["metadata"] = {"total_size": total_size}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def facts(folder: Path, name: str = "m", file_bytes_total: int | None = None) -> tuple[ModelSpec, list[str]]:
    config = json.loads((folder / "config.json").read_text())
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else None
    return model_from_checkpoint(config, index, name=name, path=str(folder), file_bytes_total=file_bytes_total)


def roundtrip(spec: ModelSpec, notes: list[str]) -> ModelSpec:
    text = render_model_yaml(spec, notes)
    files = {"state/fleet.yaml": b"", f"state/models/{spec.name}.yaml": text.encode()}
    loaded = load_desired(files, "test").models[spec.name]
    assert loaded == spec
    for note in notes:
        assert note in text
    return loaded


GLM_LIKE = {
    "architectures": ["GlmMoeDsaForCausalLM"],
    "model_type": "glm_moe_dsa",
    "num_hidden_layers": 78,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "hidden_size": 6144,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "index_head_dim": 128,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "n_shared_experts": 1,
    "max_position_embeddings": 202752,
    "quantization_config": {"quant_method": "mxfp4"},
    "_name_or_path": "zai-org/GLM-5.3",
}


def test_mla_model(tmp_path: Path) -> None:
    spec, notes = facts(write_checkpoint(tmp_path / "glm", GLM_LIKE, total_size=379_000_000_000), name="glm")
    arch = spec.architecture
    assert (arch.attention, arch.layers, arch.kv_lora_rank, arch.rope_dim) == ("mla", 78, 512, 64)
    assert arch.index_head_dim == 128
    assert arch.kv_heads is None
    assert arch.kv_slot_bytes is None
    assert spec.weight_bytes == 379_000_000_000
    assert spec.quantization == "mxfp4"
    assert spec.moe is not None
    assert (
        spec.moe.experts,
        spec.moe.experts_per_token,
        spec.moe.shared_experts,
    ) == (256, 8, 1)
    assert spec.hf_repo == "zai-org/GLM-5.3"
    assert spec.revision is None
    assert any("revision" in n for n in notes)
    roundtrip(spec, notes)


def test_gqa_model_guesses_head_dim(tmp_path: Path) -> None:
    config = {
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
        "torch_dtype": "bfloat16",
        "max_position_embeddings": 131072,
    }
    spec, notes = facts(write_checkpoint(tmp_path / "llama", config), name="llama")
    arch = spec.architecture
    assert (arch.attention, arch.kv_heads, arch.head_dim, arch.num_heads) == ("gqa", 8, 128, 32)
    assert spec.quantization == "bf16"
    assert spec.moe is None
    assert any("head_dim = hidden_size 4096 / num_attention_heads 32" in n for n in notes)
    roundtrip(spec, notes)


def test_mha_without_kv_heads(tmp_path: Path) -> None:
    config = {"num_hidden_layers": 12, "num_attention_heads": 12, "head_dim": 64}
    spec, _ = facts(write_checkpoint(tmp_path / "mha", config))
    assert (spec.architecture.attention, spec.architecture.kv_heads) == ("mha", 12)


def test_deepseek_v4_like(tmp_path: Path) -> None:
    ratios = [1, 1, 4, 128, 4, 128, 4, 1, 4]  # 9 entries for 8 layers: the last is an MTP layer
    config = {
        "model_type": "deepseek_v4",
        "num_hidden_layers": 8,
        "num_attention_heads": 64,
        "num_key_value_heads": 1,
        "head_dim": 512,
        "qk_rope_head_dim": 64,
        "hidden_size": 4096,
        "compress_ratios": ratios,
        "sliding_window": 128,
        "index_head_dim": 128,
        "n_routed_experts": 256,
        "num_experts_per_tok": 6,
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]},
    }
    spec, notes = facts(write_checkpoint(tmp_path / "dsv4", config), name="dsv4")
    arch = spec.architecture
    assert arch.attention == "mla"
    assert (arch.kv_lora_rank, arch.rope_dim) == (448, 64)  # head_dim 512 holds the 64-wide RoPE part
    assert arch.kv_slot_bytes == 584
    assert arch.compress_ratios == (1, 1, 4, 128, 4, 128, 4, 1)
    assert (arch.sliding_window, arch.index_head_dim) == (128, 128)
    assert spec.quantization == "fp8"
    assert any("MTP" in n for n in notes)
    roundtrip(spec, notes)


def test_hybrid_linear_attention(tmp_path: Path) -> None:
    config = {
        "model_type": "qwen3_next",
        "num_hidden_layers": 8,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "hidden_size": 2048,
        "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 2,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "mamba_ssm_dtype": "float32",
        "num_experts": 512,
        "num_experts_per_tok": 10,
        "torch_dtype": "bfloat16",
    }
    spec, notes = facts(write_checkpoint(tmp_path / "next", config), name="next")
    arch = spec.architecture
    assert (arch.linear_layers, arch.kv_heads, arch.head_dim) == (6, 2, 256)
    # conv: (4 - 1) x (2 x 16 x 128 + 32 x 128) x 2 B; SSM: 32 x 128 x 128 x 4 B.
    assert arch.linear_state_bytes == 3 * (2 * 16 * 128 + 32 * 128) * 2 + 32 * 128 * 128 * 4
    assert arch.layer_types == ("linear", "linear", "linear", "full") * 2
    roundtrip(spec, notes)


def test_hybrid_from_full_attention_interval(tmp_path: Path) -> None:
    config = {
        "num_hidden_layers": 48,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "full_attention_interval": 4,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
    }
    spec, notes = facts(write_checkpoint(tmp_path / "q", config))
    assert spec.architecture.linear_layers == 36
    # As transformers' Qwen3-Next config places them: layers 3, 7, ..., 47 are full attention.
    layer_types = spec.architecture.layer_types
    assert layer_types is not None
    assert [i for i, kind in enumerate(layer_types) if kind == "full"] == list(range(3, 48, 4))
    assert any("float32" in n for n in notes)
    roundtrip(spec, notes)


def test_sliding_window_layers_from_layer_types(tmp_path: Path) -> None:
    config = {
        "num_hidden_layers": 4,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 2,
        "quantization_config": {"quant_method": "mxfp4"},
    }
    spec, _ = facts(write_checkpoint(tmp_path / "oss", config))
    assert (spec.architecture.sliding_window, spec.architecture.sliding_window_layers) == (128, 2)
    assert spec.architecture.layer_types == ("sliding", "full") * 2


def test_a_layer_type_lanes_does_not_know_places_nothing(tmp_path: Path) -> None:
    config = {
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "layer_types": ["full_attention", "chunked_attention"],
    }
    spec, notes = facts(write_checkpoint(tmp_path / "odd", config))
    assert spec.architecture.layer_types is None
    assert any("chunked_attention not known" in n for n in notes)


def test_vocabulary_and_tied_head_are_read(tmp_path: Path) -> None:
    config = {**GLM_LIKE, "vocab_size": 154880, "tie_word_embeddings": False}
    spec, notes = facts(write_checkpoint(tmp_path / "glm", config))
    assert (spec.architecture.vocab_size, spec.architecture.tie_word_embeddings) == (154880, False)
    tied, _ = facts(write_checkpoint(tmp_path / "tied", {**config, "tie_word_embeddings": True}))
    assert tied.architecture.tie_word_embeddings
    roundtrip(spec, notes)


def test_vl_model_reads_text_config(tmp_path: Path) -> None:
    config = {
        "architectures": ["MiniMaxM3SparseForCausalLM"],
        "model_type": "minimax_m3_vl",
        "vision_config": {"hidden_size": 1280, "num_hidden_layers": 32},
        "text_config": {
            "num_hidden_layers": 60,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "hidden_size": 6144,
            "num_local_experts": 128,
            "num_experts_per_tok": 4,
            "max_position_embeddings": 1048576,
        },
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [1, 32]},
    }
    spec, notes = facts(write_checkpoint(tmp_path / "mm", config, total_size=252_400_000_000), name="minimax")
    arch = spec.architecture
    assert (arch.layers, arch.attention, arch.kv_heads, arch.head_dim, arch.hidden_size) == (
        60,
        "gqa",
        8,
        128,
        6144,
    )
    assert spec.quantization == "mxfp8"
    assert spec.moe is not None
    assert spec.moe.experts == 128
    assert any("text_config" in n for n in notes)
    roundtrip(spec, notes)


def test_weight_bytes_fall_back_to_file_sizes(tmp_path: Path) -> None:
    config = {"num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 64}
    spec, notes = facts(write_checkpoint(tmp_path / "small", config, total_size=None), file_bytes_total=12345)
    assert spec.weight_bytes == 12345
    assert any("shard files" in n for n in notes)


def test_missing_layers_names_config_json_and_the_key(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "broken", {"num_attention_heads": 8, "head_dim": 64})
    with pytest.raises(InputError) as caught:
        facts(folder)
    assert caught.value.file is not None
    assert caught.value.file.endswith("config.json")
    assert caught.value.field == "num_hidden_layers"


def test_missing_attention_width_is_an_error(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "broken", {"num_hidden_layers": 2, "num_attention_heads": 8})
    with pytest.raises(InputError) as caught:
        facts(folder)
    assert caught.value.field == "head_dim"


def test_missing_linear_dims_is_an_error(tmp_path: Path) -> None:
    config = {
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "head_dim": 64,
        "layer_types": ["linear_attention", "full_attention"],
    }
    with pytest.raises(InputError) as caught:
        facts(write_checkpoint(tmp_path / "broken", config))
    assert caught.value.field == "linear_num_key_heads"


def test_short_compress_ratios_is_an_error(tmp_path: Path) -> None:
    config = {
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "compress_ratios": [4, 128],
    }
    with pytest.raises(InputError) as caught:
        facts(write_checkpoint(tmp_path / "broken", config))
    assert caught.value.field == "compress_ratios"


def test_no_weight_size_names_the_index(tmp_path: Path) -> None:
    config = {"num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 64}
    with pytest.raises(InputError) as caught:
        facts(write_checkpoint(tmp_path / "broken", config, total_size=None))
    assert caught.value.file is not None
    assert caught.value.file.endswith("model.safetensors.index.json")
    assert caught.value.field == "metadata.total_size"


def test_bad_value_type(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        facts(write_checkpoint(tmp_path / "broken", {"num_hidden_layers": "many", "num_attention_heads": 4}))
    assert caught.value.field == "num_hidden_layers"
