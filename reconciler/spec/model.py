"""Model files (`state/models/<model>.yaml`): where a checkpoint lives and the
architecture figures the per-rank memory budget needs.

The budget is only as good as these figures, so they are explicit fields with
units, filled by `lanes model describe` from a checkpoint's config.json.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from reconciler.spec.base import AbsPath, Name, StrictModel
from reconciler.spec.origin import Origin

AttentionKind = Literal["mha", "gqa", "mla"]
LayerKind = Literal["full", "sliding", "linear", "none"]
"""none: a layer that keeps no cache (Nemotron-H's MoE and MLP layers, "E" and "-" in hybrid_override_pattern)."""


class MoE(StrictModel):
    experts: int = Field(ge=1)
    experts_per_token: int = Field(ge=1)
    shared_experts: int = Field(default=0, ge=0)


class Architecture(StrictModel):
    """What sizes the KV cache: per layer, per token, per sequence."""

    layers: int = Field(ge=1, description="decoder layers (num_hidden_layers)")
    attention: AttentionKind
    num_heads: int | None = Field(default=None, ge=1, description="query heads")
    kv_heads: int | None = Field(default=None, ge=1, description="key/value heads (MHA/GQA)")
    head_dim: int | None = Field(default=None, ge=1, description="per-head dimension (MHA/GQA)")
    hidden_size: int | None = Field(default=None, ge=1)
    kv_lora_rank: int | None = Field(default=None, ge=1, description="MLA latent width")
    rope_dim: int | None = Field(default=None, ge=1, description="MLA decoupled RoPE key width (qk_rope_head_dim)")
    kv_slot_bytes: int | None = Field(
        default=None,
        ge=1,
        description="bytes per token per layer of a fixed-slot MLA layout (fp8_ds_mla/nvfp4_ds_mla) "
        "when the model packs its own, e.g. DeepSeek V4's 584 (448 NoPE + 128 RoPE + 8 scale)",
    )
    compress_ratios: tuple[float, ...] | None = Field(
        default=None,
        description="DeepSeek V4: per layer; r > 1 keeps one slot per r tokens, r <= 1 is a sliding-window layer. "
        "With kv_source_layers (DeepSeek V4.1) only 0 is a sliding-window layer and 1 and 2 are compressed "
        "(vLLM's deepseek_v41 attention takes 0, 1 and 2; its deepseek_v4 one clamps r to at least 1, SWA-only)",
    )
    kv_source_layers: tuple[int, ...] | None = Field(
        default=None,
        description="DeepSeek V4.1 (config kv_source_layer_ids): the ratio-1/2 layers that keep compressed KV "
        "(and its indexer); the other ratio-1/2 layers read theirs (SGLang deepseek_v4_memory_pool.py "
        "collect_sources_by_ratio, 0.5.23)",
    )
    indexer_layers: tuple[int, ...] | None = Field(
        default=None,
        description="0-based layers that keep a sparse-attention indexer cache, as the engines select them: the "
        "layers that compute their own top-k (vLLM 0.33.0 deepseek_v32/attention.py from index_topk_pattern or "
        "index_topk_freq and index_skip_topk_offset; SGLang 0.5.23 dsa_layer_skips_topk, indexer_types first). "
        "None: every full layer, or with compress_ratios every ratio-4 layer",
    )
    sliding_window: int | None = Field(default=None, ge=1, description="tokens a sliding-window layer keeps")
    sliding_window_layers: int = Field(
        default=0, ge=0, description="layers that use the sliding window (models with interleaved SWA)"
    )
    index_head_dim: int | None = Field(
        default=None, ge=1, description="sparse-attention indexer key width; its cache is sized too"
    )
    index_dtype_bytes: float = Field(default=1.0, gt=0, description="indexer key bytes per element (fp8)")
    linear_layers: int = Field(default=0, ge=0, description="linear/recurrent layers of a hybrid model")
    linear_state_bytes: int = Field(
        default=0,
        ge=0,
        description="fixed recurrent state per sequence per linear layer, in bytes, all TP ranks together; for a "
        "gated delta net (Qwen3-Next, Qwen3.5): (conv_kernel - 1) x (2 x k_heads x k_dim + v_heads x v_dim) x "
        "conv dtype + v_heads x k_dim x v_dim x ssm dtype (vLLM mamba_utils gated_delta_net_state_shape); for "
        "Mamba-2 (Nemotron-H): (conv_kernel - 1) x (heads x head_dim + 2 x n_groups x state) x conv dtype + "
        "heads x head_dim x state x ssm dtype (mamba2_state_shape)",
    )
    layer_types: tuple[LayerKind, ...] | None = Field(
        default=None,
        description="per layer, in order: full, sliding or linear attention, or none (no cache: a MoE/MLP layer "
        "of Nemotron-H) (config.json layer_types, with full_attention/sliding_attention/linear_attention "
        "shortened, or hybrid_override_pattern); places each kind on its pipeline stage",
    )
    max_position_embeddings: int | None = Field(default=None, ge=1)
    vocab_size: int | None = Field(
        default=None, ge=1, description="vocabulary rows of the input embedding and the LM head (config.json)"
    )
    tie_word_embeddings: bool = Field(
        default=False, description="the LM head reuses the input embedding (config.json tie_word_embeddings)"
    )
    embedding_dtype_bytes: float = Field(
        default=2.0,
        gt=0,
        description="bytes per element of the embedding and LM head; quantized checkpoints usually keep them bf16",
    )

    @model_validator(mode="after")
    def _figures_complete(self) -> Architecture:
        if self.attention == "mla":
            if self.kv_lora_rank is None or self.rope_dim is None:
                raise ValueError("attention 'mla' needs kv_lora_rank and rope_dim")
        elif self.kv_heads is None or self.head_dim is None:
            raise ValueError(f"attention '{self.attention}' needs kv_heads and head_dim")
        if self.compress_ratios is not None and len(self.compress_ratios) != self.layers:
            raise ValueError(
                f"compress_ratios has {len(self.compress_ratios)} entries but the model has {self.layers} layers"
            )
        for name in ("kv_source_layers", "indexer_layers"):
            picked = getattr(self, name)
            if picked is None:
                continue
            if list(picked) != sorted(set(picked)) or any(i < 0 or i >= self.layers for i in picked):
                raise ValueError(f"{name} must be distinct layer numbers in order, each below layers ({self.layers})")
        if self.kv_source_layers is not None:
            if self.compress_ratios is None:
                raise ValueError("kv_source_layers needs compress_ratios")
            if any(self.compress_ratios[i] not in (1, 2) for i in self.kv_source_layers):
                raise ValueError("kv_source_layers must be layers of compress ratio 1 or 2")
        if self.linear_layers > self.layers:
            raise ValueError("linear_layers cannot exceed layers")
        if self.linear_layers and not self.linear_state_bytes:
            raise ValueError("linear_layers needs linear_state_bytes")
        if self.layer_types is not None:
            if len(self.layer_types) != self.layers:
                raise ValueError(
                    f"layer_types has {len(self.layer_types)} entries but the model has {self.layers} layers"
                )
            if "linear" in self.layer_types and not self.linear_state_bytes:
                raise ValueError("linear layers in layer_types need linear_state_bytes")
        return self


class ModelSpec(StrictModel):
    """A checkpoint as it sits on every host that serves it."""

    name: Name
    hf_repo: str = Field(min_length=1, description="Hugging Face repo id")
    revision: str | None = Field(default=None, description="commit sha of the HF repo; a branch is not a pin")
    path: AbsPath = Field(description="absolute path of the checkpoint on each host")
    weight_bytes: int = Field(gt=0, description="bytes of all weight shards (safetensors index total_size)")
    quantization: str = Field(default="bf16", description="weight format: bf16, fp8, mxfp8, mxfp4, nvfp4, ...")
    moe: MoE | None = None
    architecture: Architecture
    origin: Origin | None = Field(
        default=None,
        description="where the files come from when a rank host lacks them: a folder on the control node "
        "({path}), on an origin host ({host, path}) or a fleet host holding it at `path` ({host}); needs "
        "the manifest `lanes model manifest` writes beside this file (<model>.manifest.json)",
    )

    @field_validator("revision", mode="before")
    @classmethod
    def _revision_text(cls, value: object) -> object:
        if value is not None and not isinstance(value, str):
            raise ValueError("YAML read this revision as a number: put the sha in quotes")
        return value
