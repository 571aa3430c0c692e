"""sparkrun's published VRAM estimate, restated from its source for the side-by-side table.

sparkrun (spark-arena/sparkrun) is the estimator people run on Sparks. It is
not installed here (it fetches configs from the Hub at estimate time), so
this module restates its arithmetic, read from:

- `src/sparkrun/models/vram.py` at 0041b8f8fc1320ffa2e85d2d0ac760ee6be19de7
  (v0.2.40): `extract_model_info` (layers, KV heads, head_dim = head_dim or
  hidden_size / num_attention_heads, a multimodal config's text_config
  filling what the top level lacks), `estimate_vram` (weights in "GB" that
  are GiB, split over tp x pp; dense KV 2 x layers x kv_heads x head_dim x
  bytes per token, also split over tp x pp; KV dtype bfloat16 unless one is
  named; no runtime overhead) and `core/recipe.py` (the weights are the
  checkpoint's safetensors bytes when the model is pre-quantized);
- `src/sparkrun/models/kv/mla.py` at 5570c317237ce83bea485bc3c68eab22cb21f53b:
  an MLA model (qk_rope_head_dim in the config) caches (latent + rope) x
  bytes per layer, the latent being kv_lora_rank or, for DeepSeek V4,
  head_dim - qk_rope_head_dim; fp8_ds_mla / nvfp4_ds_mla are fixed slots of
  656 B (584 B for model_type deepseek_v4); compress_ratios (cut to the layer
  count) keep per_layer / r for r > 1 and drop the rest; the cache is
  replicated on every TP rank; sliding-window and indexer caches are left
  out and the figure is called a floor; a hybrid linear/MLA model is not
  sized;
- `src/sparkrun/models/dtypes.py` at 7dfe8b2807238e97a614fc604a52453ed0e8ec44:
  nvfp4 KV is 0.5625 bytes per element.

The MLA cache is divided by pp only (every TP rank holds it whole, as
mla.py's `replicates_kv` says); the newer vram.py that dispatches to
mla.py is not in the public snapshot read here, so this is the reading of
mla.py's own contract. Nothing is copied: the code below is written from
the formulas.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GIB = 1 << 30
SPARK_GIB = 121.0
"""vram.py DGX_SPARK_VRAM_GB: what a gpu_memory_utilization is a fraction of (labelled GB, used as GiB)."""

KV_BYTES = {"bfloat16": 2.0, "bf16": 2.0, "auto": 2.0, "float16": 2.0, "fp16": 2.0, "fp8": 1.0,
            "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "nvfp4": 0.5625}  # fmt: skip
SLOTS = {"fp8_ds_mla": (656, 584), "nvfp4_ds_mla": (656, 584)}
"""(any MLA model, model_type deepseek_v4): bytes per token per layer (kv/mla.py _MLA_SLOT_BYTES)."""
NESTED = ("text_config", "llm_config", "language_config")


@dataclass
class Estimate:
    weights: float
    kv_per_token: float | None
    kv_total: float | None
    need: float
    kind: str
    floor: bool = False
    notes: list[str] = field(default_factory=list)


def _arch(config: Mapping[str, Any]) -> dict[str, Any]:
    """The text config's keys, the top level first, as extract_model_info reads them."""
    merged: dict[str, Any] = {}
    for key in NESTED:
        nested = config.get(key)
        if isinstance(nested, Mapping):
            merged.update(nested)
            break
    merged.update({k: v for k, v in config.items() if k not in NESTED})
    return merged


def _first(cfg: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if key in cfg:
            return cfg[key]
    return None


def _mla_per_token(cfg: Mapping[str, Any], layers: int, kv_dtype: str, notes: list[str]) -> tuple[float | None, bool]:
    rope = int(cfg["qk_rope_head_dim"])
    latent = cfg.get("kv_lora_rank") or None
    if latent is None and cfg.get("head_dim"):
        head = int(cfg["head_dim"])
        latent = head - rope if head > rope else head
    model_type = str(cfg.get("model_type") or "")
    if kv_dtype in SLOTS:
        plain, v4 = SLOTS[kv_dtype]
        per_layer = float(v4 if model_type == "deepseek_v4" else plain)
    else:
        if latent is None:
            return None, False
        per_layer = (int(latent) + rope) * KV_BYTES[kv_dtype]
    ratios = cfg.get("compress_ratios")
    excluded = []
    if isinstance(ratios, list):
        ratios = ratios[:layers]
        total = sum(per_layer / r for r in ratios if r and r > 1)
        if any(not r or r <= 1 for r in ratios):
            excluded.append("sliding-window")
    else:
        total = per_layer * layers
    if cfg.get("index_head_dim"):
        excluded.append("sparse-indexer")
    if excluded:
        notes.append(f"floor: the {' and '.join(excluded)} cache left out")
    return (total or None), bool(excluded)


def estimate(
    config: Mapping[str, Any],
    weight_bytes: int,
    *,
    tp: int,
    pp: int,
    kv_dtype: str,
    max_model_len: int,
) -> Estimate:
    """Per-rank weights, KV per token, KV at max_model_len and their sum, in bytes."""
    cfg = _arch(config)
    notes: list[str] = []
    shards = tp * pp
    weights = weight_bytes / shards
    layers = int(_first(cfg, "num_hidden_layers", "n_layer", "num_layers", "n_layers"))
    types = cfg.get("layer_types") or []
    if "qk_rope_head_dim" in cfg or str(cfg.get("model_type") or "").startswith("deepseek_v"):
        if "linear_attention" in types:
            notes.append("hybrid linear/MLA: not sized")
            return Estimate(weights, None, None, weights, "mla", True, notes)
        total, floor = _mla_per_token(cfg, layers, kv_dtype, notes)
        if total is None:
            return Estimate(weights, None, None, weights, "mla", True, notes)
        per_rank = total / pp
        return Estimate(weights, per_rank, per_rank * max_model_len, weights + per_rank * max_model_len, "mla", floor,
                        notes)  # fmt: skip
    kv_heads = _first(cfg, "num_key_value_heads", "num_kv_heads") or _first(cfg, "num_attention_heads", "n_head")
    head_dim = cfg.get("head_dim")
    if head_dim is None and cfg.get("hidden_size"):
        heads = _first(cfg, "num_attention_heads", "n_head")
        head_dim = int(cfg["hidden_size"]) // int(heads)
    if head_dim is None:
        notes.append("no head_dim and no hidden_size: KV not sized")
        return Estimate(weights, None, None, weights, "dense", True, notes)
    dtype = kv_dtype if kv_dtype in KV_BYTES else "bfloat16"
    total = 2.0 * layers * int(kv_heads) * int(head_dim) * KV_BYTES[dtype]
    interval = cfg.get("full_attention_interval") or 1
    if (types and any(t != "full_attention" for t in types)) or interval > 1:
        notes.append(f"all {layers} layers sized as full attention")
    per_rank = total / shards
    return Estimate(weights, per_rank, per_rank * max_model_len, weights + per_rank * max_model_len, "dense", False,
                    notes)  # fmt: skip


def budget(utilization: float) -> float:
    """What sparkrun compares a rank's need with: utilization x 121 GiB."""
    return utilization * SPARK_GIB * GIB
