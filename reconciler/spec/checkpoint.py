"""`lanes model describe PATH`: a model file from a checkpoint's config and index.

The memory budget is only as good as the architecture figures of the model
file, and people copy them wrong (head_dim of an MLA model, a VL model's
outer config). This reads them from the checkpoint's `config.json` and
`model.safetensors.index.json` (handed in as parsed mappings: no I/O here)
and says, next to each fact it had to guess, what it assumed.

Keys read (a VL model's `text_config` / `llm_config` / `language_config`
is read first, the outer config fills what it lacks):

- num_hidden_layers, num_attention_heads, num_key_value_heads (absent: MHA),
  head_dim (absent: hidden_size / num_attention_heads), hidden_size,
  max_position_embeddings;
- MLA when qk_rope_head_dim is present with kv_lora_rank (DeepSeek V2/V3,
  GLM-5) or with head_dim (DeepSeek V4: the cached width is head_dim, of
  which qk_rope_head_dim is the RoPE part, so kv_lora_rank = head_dim -
  rope); DeepSeek V4 (model_type deepseek_v4*) also gets kv_slot_bytes 584;
- compress_ratios (cut to num_hidden_layers: the extra entries are MTP
  layers whose cache the engines do not allocate: vLLM 0.33.0 builds its
  DeepSeek V4 MTP layer SWA-only whatever the entry says), kv_source_layer_ids (DeepSeek V4.1) as
  kv_source_layers, sliding_window, index_head_dim;
- the layers that keep an indexer cache when not all do (indexer_layers), as
  vLLM 0.33.0 picks them (vllm/models/deepseek_v32/attention.py): with
  index_topk_pattern the layers not marked "S", else with index_topk_freq f
  > 1 and index_skip_topk_offset o (default 2) the layers l with
  max(l - o + 1, 0) % f == 0;
- hybrid_override_pattern (Nemotron-H, no layer_types): "*" attention, "M"
  Mamba-2 (linear, with mamba_num_heads, mamba_head_dim, n_groups,
  ssm_state_size, conv_kernel, mamba_ssm_cache_dtype for its state), "E"
  and "-" MoE / MLP layers that keep no cache ("none");
- layer_types: 'sliding_attention' layers count as sliding_window_layers,
  'linear_attention' (or mamba) layers as linear_layers, and the list
  itself (full / sliding / linear) says which pipeline stage holds which;
  without layer_types, full_attention_interval k means layer i is full
  attention when (i + 1) % k == 0 and linear otherwise (Qwen3-Next);
- vocab_size and tie_word_embeddings: the embedding and LM head, which
  the engines place on the first and last pipeline stage;
- the recurrent state of a linear (gated delta net) layer, per sequence:
  conv state (linear_conv_kernel_dim - 1) x (2 x linear_num_key_heads x
  linear_key_head_dim + linear_num_value_heads x linear_value_head_dim) x
  2 bytes (bf16), plus SSM state linear_num_value_heads x
  linear_key_head_dim x linear_value_head_dim x bytes of mamba_ssm_dtype
  (float32 when the config does not say: the larger choice);
- quantization_config (quant_method, fmt, quant_algo, format) for the
  weight format, else torch_dtype / dtype;
- n_routed_experts / num_experts / num_local_experts and
  num_experts_per_tok for MoE;
- weight bytes: the index's metadata.total_size, else the sum of the
  shards' file sizes.

A fact the budget cannot do without (layers, the attention widths, weight
bytes) that is missing is an `InputError` naming config.json and the key.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from reconciler.errors import InputError
from reconciler.spec.model import ModelSpec

NESTED_CONFIGS = ("text_config", "llm_config", "language_config")
DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2}
DSV4_SLOT_BYTES = 584
"""DeepSeek V4 packs 448 B NoPE + 128 B RoPE + 8 B scale per token per layer: vLLM's
MLAAttentionSpec (vllm/v1/kv_cache_interface.py, real_page_size_bytes) for fp8_ds_mla and
nvfp4_ds_mla; sparkrun's kv/mla.py (spark-arena/sparkrun @ 5570c31) keys the same 584 on
model_type deepseek_v4."""


class _Config:
    """The text config of a checkpoint, with the outer config as fallback."""

    def __init__(self, config: Mapping[str, Any], path: str) -> None:
        self.outer = config
        self.inner: Mapping[str, Any] = {}
        self.nested_key: str | None = None
        for key in NESTED_CONFIGS:
            nested = config.get(key)
            if isinstance(nested, Mapping):
                self.inner = nested
                self.nested_key = key
                break
        self.file = posixpath.join(path, "config.json")

    def get(self, *keys: str) -> Any:
        for source in (self.inner, self.outer):
            for key in keys:
                if key in source and source[key] is not None:
                    return source[key]
        return None

    def where(self, key: str) -> str:
        if self.nested_key is not None and key in self.inner:
            return f"{self.nested_key}.{key}"
        return key

    def integer(self, *keys: str, required: bool = False) -> int | None:
        value = self.get(*keys)
        if value is None:
            if required:
                raise InputError(f"the checkpoint config has no '{keys[0]}'", file=self.file, field=keys[0])
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value or value < 0:
            raise InputError(f"expected a whole number, got {value!r}", file=self.file, field=self.where(keys[0]))
        return int(value)


def _quantization(cfg: _Config, notes: list[str]) -> str:
    qc = cfg.get("quantization_config")
    if isinstance(qc, Mapping):
        method = str(qc.get("quant_method") or "").lower()
        algo = str(qc.get("quant_algo") or "").lower()
        fmt = str(qc.get("fmt") or qc.get("format") or "").lower()
        for token in ("nvfp4", "mxfp4", "mxfp8"):
            if token in (method, algo) or token in fmt:
                return token
        if method == "fp8" and list(qc.get("weight_block_size") or []) == [1, 32]:
            notes.append("quantization: fp8 with weight_block_size [1, 32] taken as mxfp8")
            return "mxfp8"
        if method == "fp8" or algo == "fp8" or "float-quantized" in fmt or fmt in {"e4m3", "e5m2"}:
            return "fp8"
        if method in {"awq", "gptq"} or "pack-quantized" in fmt:
            return method or "int4"
        if method:
            notes.append(f"quantization: quant_method '{method}' kept as written; check the weight format")
            return method
    dtype = str(cfg.get("torch_dtype", "dtype") or "").lower()
    names = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
    if dtype in names:
        return names[dtype]
    notes.append("quantization: no quantization_config or torch_dtype; assumed bf16")
    return "bf16"


def _kind(name: str) -> str | None:
    """A config's layer type as the model file spells it, or None for one lanes cannot size."""
    name = name.lower()
    if "sliding" in name:
        return "sliding"
    if "linear" in name or "mamba" in name:
        return "linear"
    if name in {"full_attention", "attention", "full"}:
        return "full"
    return None


def _layer_kinds(cfg: _Config, layers: int, notes: list[str]) -> tuple[int, int, list[str] | None]:
    """(sliding layers, linear layers, every layer's kind in order when the config says it)."""
    types = cfg.get("layer_types")
    if isinstance(types, list):
        raw = [str(t) for t in types[:layers]]
        kinds = [_kind(t) for t in raw]
        sliding = kinds.count("sliding")
        linear = kinds.count("linear")
        unknown = sorted({t for t, k in zip(raw, kinds, strict=True) if k is None})
        if unknown:
            notes.append(f"layer_types {', '.join(unknown)} not known: sized as full layers, layers not placed")
            return sliding, linear, None
        if len(kinds) < layers:
            notes.append(f"layer_types lists {len(kinds)} of {layers} layers: layers not placed")
            return sliding, linear, None
        return sliding, linear, [k for k in kinds if k is not None]
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        return _override_pattern(pattern, layers, notes)
    interval = cfg.integer("full_attention_interval")
    if interval and interval > 1:
        # Qwen3-Next / Qwen3.5 (transformers' configs): layer i is full attention when (i + 1) % interval == 0.
        placed = ["full" if (i + 1) % interval == 0 else "linear" for i in range(layers)]
        linear = placed.count("linear")
        notes.append(
            f"no layer_types: full_attention_interval {interval} read as {linear} linear layers, "
            f"every {interval}th layer full attention"
        )
        return 0, linear, placed
    return 0, 0, None


PATTERN_KINDS = {"*": "full", "M": "linear", "E": "none", "-": "none"}
"""Nemotron-H's hybrid_override_pattern, one character a layer: "*" attention, "M" Mamba-2, "E" MoE and
"-" MLP (no cache), as vLLM's nemotron_h.py reads it (ALL_DECODER_LAYER_TYPES)."""


def _override_pattern(pattern: str, layers: int, notes: list[str]) -> tuple[int, int, list[str] | None]:
    kinds = [PATTERN_KINDS.get(c) for c in pattern[:layers]]
    linear = kinds.count("linear")
    unknown = sorted({c for c, k in zip(pattern, kinds, strict=False) if k is None})
    if unknown or len(kinds) < layers:
        notes.append(
            f"hybrid_override_pattern has {len(kinds)} of {layers} layers or unknown marks {unknown}: "
            "every layer sized as attention"
        )
        return 0, 0, None
    notes.append(
        f"hybrid_override_pattern: {kinds.count('full')} attention, {linear} Mamba-2 and "
        f"{kinds.count('none')} MoE/MLP layers (no cache)"
    )
    return 0, linear, [k for k in kinds if k is not None]


def _mamba2_state(cfg: _Config, notes: list[str]) -> int:
    """Mamba-2 state per sequence per layer as vLLM 0.33.0 shapes it, all TP ranks together
    (vllm/model_executor/layers/mamba/mamba_utils.py mamba2_state_shape, with nemotron_h.py's
    intermediate_size = mamba_num_heads x mamba_head_dim): conv (conv_kernel - 1) x (intermediate +
    2 x n_groups x ssm_state_size) in the model dtype, SSM heads x head_dim x ssm_state_size in
    mamba_ssm_cache_dtype."""
    keys = ("mamba_num_heads", "mamba_head_dim", "n_groups", "ssm_state_size", "conv_kernel")
    heads, head_dim, groups, state, kernel = (cfg.integer(key, required=True) or 0 for key in keys)
    conv_dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").lower()
    ssm_dtype = str(cfg.get("mamba_ssm_cache_dtype") or cfg.get("mamba_ssm_dtype") or "").lower()
    if ssm_dtype not in DTYPE_BYTES:
        notes.append("Mamba-2 layers: mamba_ssm_cache_dtype not given; SSM state sized as float32")
        ssm_dtype = "float32"
    conv = max(kernel - 1, 0) * (heads * head_dim + 2 * groups * state) * DTYPE_BYTES.get(conv_dtype, 2)
    ssm = heads * head_dim * state * DTYPE_BYTES[ssm_dtype]
    notes.append(f"Mamba-2 layers: state {conv} B conv + {ssm} B SSM per sequence per layer")
    return conv + ssm


def _linear_state(cfg: _Config, notes: list[str]) -> int:
    if cfg.get("mamba_num_heads") is not None:
        return _mamba2_state(cfg, notes)
    keys = (
        "linear_num_key_heads",
        "linear_num_value_heads",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_conv_kernel_dim",
    )
    k_heads, v_heads, k_dim, v_dim, kernel = (cfg.integer(key, required=True) for key in keys)
    assert k_heads is not None
    assert v_heads is not None
    assert k_dim is not None
    assert v_dim is not None
    assert kernel is not None
    ssm_dtype = str(cfg.get("mamba_ssm_dtype") or "").lower()
    if ssm_dtype not in DTYPE_BYTES:
        notes.append("linear layers: mamba_ssm_dtype not given; recurrent state sized as float32")
        ssm_dtype = "float32"
    conv = max(kernel - 1, 0) * (2 * k_heads * k_dim + v_heads * v_dim) * 2
    ssm = v_heads * k_dim * v_dim * DTYPE_BYTES[ssm_dtype]
    notes.append(f"linear layers: recurrent state {conv} B conv + {ssm} B SSM per sequence per layer")
    return conv + ssm


def _attention(cfg: _Config, arch: dict[str, Any], notes: list[str]) -> None:
    rope = cfg.integer("qk_rope_head_dim")
    lora = cfg.integer("kv_lora_rank")
    head_dim = cfg.integer("head_dim")
    heads = cfg.integer("num_attention_heads", "n_head", "num_heads")
    hidden = cfg.integer("hidden_size", "d_model")
    if heads is not None:
        arch["num_heads"] = heads
    if hidden is not None:
        arch["hidden_size"] = hidden
    if rope is not None and (lora is not None or head_dim is not None):
        arch["attention"] = "mla"
        arch["rope_dim"] = rope
        if lora is not None:
            arch["kv_lora_rank"] = lora
        else:
            assert head_dim is not None
            if head_dim <= rope:
                raise InputError(
                    f"head_dim {head_dim} is not larger than qk_rope_head_dim {rope}; cannot size the MLA latent",
                    file=cfg.file,
                    field=cfg.where("head_dim"),
                )
            arch["kv_lora_rank"] = head_dim - rope
            notes.append(f"MLA without kv_lora_rank: latent = head_dim {head_dim} - qk_rope_head_dim {rope}")
        model_type = str(cfg.get("model_type") or "").lower()
        if model_type.startswith("deepseek_v4"):
            arch["kv_slot_bytes"] = DSV4_SLOT_BYTES
            notes.append(f"kv_slot_bytes {DSV4_SLOT_BYTES}: the DeepSeek V4 fp8_ds_mla/nvfp4_ds_mla slot")
        return
    if heads is None:
        raise InputError(
            "the checkpoint config has no 'num_attention_heads'", file=cfg.file, field="num_attention_heads"
        )
    kv_heads = cfg.integer("num_key_value_heads", "num_kv_heads")
    if kv_heads is None:
        kv_heads = heads
        notes.append("no num_key_value_heads: multi-head attention (one KV head per query head)")
    if head_dim is None:
        if hidden is None:
            raise InputError(
                "the checkpoint config has neither 'head_dim' nor 'hidden_size'",
                file=cfg.file,
                field="head_dim",
            )
        head_dim = hidden // heads
        notes.append(f"head_dim = hidden_size {hidden} / num_attention_heads {heads} = {head_dim}")
    arch["attention"] = "mha" if kv_heads == heads else "gqa"
    arch["kv_heads"] = kv_heads
    arch["head_dim"] = head_dim


def _compress_ratios(cfg: _Config, layers: int, notes: list[str]) -> list[float] | None:
    ratios = cfg.get("compress_ratios")
    if ratios is None:
        return None
    if not isinstance(ratios, list) or not all(isinstance(r, int | float) and not isinstance(r, bool) for r in ratios):
        raise InputError("expected a list of numbers", file=cfg.file, field=cfg.where("compress_ratios"))
    if len(ratios) < layers:
        raise InputError(
            f"lists {len(ratios)} ratios but num_hidden_layers is {layers}",
            file=cfg.file,
            field=cfg.where("compress_ratios"),
        )
    if len(ratios) > layers:
        notes.append(f"compress_ratios has {len(ratios)} entries for {layers} layers; the extra (MTP) ones dropped")
    return [float(r) for r in ratios[:layers]]


def _indexer_layers(cfg: _Config, layers: int, notes: list[str]) -> list[int] | None:
    """The layers computing their own top-k as vLLM selects them; None when every layer does."""
    pattern = cfg.get("index_topk_pattern")
    if isinstance(pattern, str) and pattern:
        picked = [i for i in range(layers) if i >= len(pattern) or pattern[i] != "S"]
    else:
        freq = cfg.integer("index_topk_freq") or 1
        if freq <= 1:
            return None
        offset = cfg.integer("index_skip_topk_offset")
        offset = 2 if offset is None else offset
        picked = [i for i in range(layers) if max(i - offset + 1, 0) % freq == 0]
    if len(picked) == layers:
        return None
    types = cfg.get("indexer_types")
    if isinstance(types, list) and len(types) == layers:
        full = [i for i, kind in enumerate(types) if kind != "shared"]
        if full != picked:
            notes.append(
                f"indexer_types marks {len(full)} layers full where index_topk_freq/pattern gives {len(picked)}: "
                "vLLM follows the latter, SGLang the former; indexer_layers follows vLLM"
            )
    notes.append(f"indexer cache on {len(picked)} of {layers} layers (the ones that compute their own top-k)")
    return picked


def _moe(cfg: _Config, notes: list[str]) -> dict[str, int] | None:
    experts = cfg.integer("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
    if not experts or experts <= 1:
        return None
    per_token = cfg.integer("num_experts_per_tok", "moe_top_k", "num_experts_per_token", required=True)
    out = {"experts": experts, "experts_per_token": per_token or 1}
    shared = cfg.integer("n_shared_experts", "num_shared_experts")
    if shared:
        out["shared_experts"] = shared
    elif cfg.integer("shared_expert_intermediate_size"):
        out["shared_experts"] = 1
        notes.append("shared_expert_intermediate_size set without a count: one shared expert")
    return out


def _weight_bytes(index: Mapping[str, Any] | None, path: str, file_bytes_total: int | None, notes: list[str]) -> int:
    if index is not None:
        metadata = index.get("metadata")
        total = metadata.get("total_size") if isinstance(metadata, Mapping) else None
        if isinstance(total, int | float) and not isinstance(total, bool) and total > 0:
            return int(total)
    if file_bytes_total:
        notes.append("weight_bytes: the sum of the shard files (no metadata.total_size in the index)")
        return file_bytes_total
    raise InputError(
        "no weight size: the index has no metadata.total_size and no shard files were measured",
        file=posixpath.join(path, "model.safetensors.index.json"),
        field="metadata.total_size",
    )


def model_from_checkpoint(
    config: Mapping[str, Any],
    index: Mapping[str, Any] | None,
    *,
    name: str,
    path: str,
    file_bytes_total: int | None,
    hf_repo: str | None = None,
    revision: str | None = None,
) -> tuple[ModelSpec, list[str]]:
    """The model file a checkpoint describes, and notes on what had to be guessed."""
    notes: list[str] = []
    cfg = _Config(config, path)
    if cfg.nested_key is not None:
        notes.append(f"architecture read from {cfg.nested_key} (a multimodal checkpoint)")
    layers = cfg.integer("num_hidden_layers", "num_layers", "n_layers", "n_layer", required=True)
    assert layers is not None
    arch: dict[str, Any] = {"layers": layers}
    _attention(cfg, arch, notes)
    ratios = _compress_ratios(cfg, layers, notes)
    if ratios is not None:
        arch["compress_ratios"] = ratios
    window = cfg.integer("sliding_window")
    if window and cfg.get("use_sliding_window") is not False:
        arch["sliding_window"] = window
    sliding, linear, kinds = _layer_kinds(cfg, layers, notes)
    if sliding:
        arch["sliding_window_layers"] = sliding
        if "sliding_window" not in arch:
            notes.append("sliding_attention layers but no sliding_window: they are sized as full layers")
    elif window and ratios is None and "sliding_window" in arch:
        notes.append("sliding_window without layer_types: every layer is sized as full (an upper bound)")
    if linear:
        arch["linear_layers"] = linear
        arch["linear_state_bytes"] = _linear_state(cfg, notes)
    if kinds is not None and ratios is None and set(kinds) != {"full"}:
        arch["layer_types"] = kinds
    index_dim = cfg.integer("index_head_dim")
    if index_dim:
        arch["index_head_dim"] = index_dim
        picked = _indexer_layers(cfg, layers, notes)
        if picked is not None:
            arch["indexer_layers"] = picked
    sources = cfg.get("kv_source_layer_ids")
    if ratios is not None and isinstance(sources, list) and sources:
        arch["kv_source_layers"] = sorted({int(i) for i in sources if int(i) < layers})
    max_pos = cfg.integer("max_position_embeddings")
    if max_pos:
        arch["max_position_embeddings"] = max_pos
    vocab = cfg.integer("vocab_size")
    if vocab:
        arch["vocab_size"] = vocab
    tied = cfg.get("tie_word_embeddings")
    if isinstance(tied, bool):
        arch["tie_word_embeddings"] = tied
    repo = hf_repo
    if repo is None:
        guess = str(config.get("_name_or_path") or "")
        if guess.count("/") == 1 and not guess.startswith(("/", ".")):
            repo = guess
            notes.append(f"hf_repo taken from _name_or_path '{guess}'")
        else:
            repo = f"unknown/{name}"
            notes.append("hf_repo unknown: set it to the Hugging Face repo id")
    if revision is None:
        notes.append("revision not set: write the 40-hex commit sha of the checkpoint (the model-revision rule)")
    doc: dict[str, Any] = {
        "name": name,
        "hf_repo": repo,
        "revision": revision,
        "path": path,
        "weight_bytes": _weight_bytes(index, path, file_bytes_total, notes),
        "quantization": _quantization(cfg, notes),
        "architecture": arch,
    }
    moe = _moe(cfg, notes)
    if moe is not None:
        doc["moe"] = moe
    try:
        return ModelSpec.model_validate(doc), notes
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field = ".".join(str(p) for p in first["loc"])
        raise InputError(f"{first['msg']} (from the checkpoint's config)", file=cfg.file, field=field) from None


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


def _emit(data: Mapping[str, Any], indent: str, lines: list[str]) -> None:
    for key, value in data.items():
        if isinstance(value, Mapping):
            lines.append(f"{indent}{key}:")
            _emit(value, indent + "  ", lines)
        elif isinstance(value, list | tuple):
            lines.append(f"{indent}{key}: [{', '.join(_scalar(v) for v in value)}]")
        else:
            comment = f"   # {value / (1 << 30):.1f} GiB" if key == "weight_bytes" else ""
            lines.append(f"{indent}{key}: {_scalar(value)}{comment}")


def render_model_yaml(spec: ModelSpec, notes: list[str]) -> str:
    """The model file text for state/models/<name>.yaml, notes as comments."""
    lines = [
        f"# {spec.name}: written by `lanes model describe` from the checkpoint's config.json and",
        "# model.safetensors.index.json.",
        "# yaml-language-server: $schema=../../schemas/model.schema.json",
    ]
    if notes:
        lines.append("#")
        lines.append("# Assumed or worth checking:")
        lines.extend(f"#   - {note}" for note in notes)
    data = spec.model_dump(mode="python", exclude_none=True)
    data["architecture"] = spec.architecture.model_dump(mode="python", exclude_none=True, exclude_defaults=True)
    if spec.moe is not None:
        data["moe"] = spec.moe.model_dump(mode="python", exclude_defaults=True)
    data.pop("name", None)
    ordered: dict[str, Any] = {}
    for key in ("hf_repo", "revision", "path", "weight_bytes", "quantization", "moe", "architecture"):
        if key in data:
            ordered[key] = data[key]
        elif key == "revision":
            ordered["__revision__"] = None
    body: list[str] = []
    for key, value in ordered.items():
        if key == "__revision__":
            body.append("# revision: <40-hex commit sha of the checkpoint>")
            continue
        _emit({key: value}, "", body)
    return "\n".join([*lines, *body]) + "\n"
