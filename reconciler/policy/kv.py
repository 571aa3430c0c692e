"""KV cache bytes one rank must hold: the architecture-specific half of the budget.

Why this module exists: the per-rank budget is only as good as its KV
figure, and the KV figure depends on the attention kind far more than on
the model size (an MLA latent is ~30x smaller than GQA keys and values, but
it is not sharded by tensor parallelism). Every figure (bytes per element,
fixed slot sizes) comes from the `memory-budget` parameters in
`policies/rules.yaml`; this module only does the arithmetic.

Per layer and token, on one rank:

- MHA/GQA: 2 x max(1, ceil(kv_heads / tp)) x head_dim x dtype_bytes.
- MLA: (kv_lora_rank + rope_dim) x dtype_bytes, or a fixed slot for the
  fp8_ds_mla / nvfp4_ds_mla layouts (the model's own `kv_slot_bytes`, e.g.
  DeepSeek V4's 584, wins over the layout's default); the same on every TP
  rank.
- Indexer (sparse attention, `index_head_dim`): index_head_dim x
  index_dtype_bytes on every layer that keeps a full or compressed cache,
  at that layer's compression, the same on every TP rank.

Per layer, the tokens kept: max_model_len (full layers); ceil(len / r) slots
(DeepSeek V4 layers with compress ratio r > 1); min(len, sliding_window)
(layers with ratio <= 1 and interleaved sliding-window layers). `dcp` splits
the tokens of every token-proportional cache: ceil(tokens / dcp) per rank.
Linear/recurrent layers keep `linear_state_bytes` per sequence, split over
tp like the heads it holds (ceil). Everything is for `min_sequences`
sequences.

Pipeline stages hold layers/pp layers, one more on the first (layers mod pp)
stages, as vLLM and SGLang split them. With `compress_ratios` the kind of
every layer is known and each stage sums its own slice; otherwise (sliding
or linear layers counted, not placed) a stage is assumed to hold the most
expensive layers it could: an upper bound for that stage, exact for pp = 1.

Where this matches sparkrun (spark-arena/sparkrun, models/vram.py and
models/kv/mla.py, read 2026-10):

- MLA sized from the latent plus the RoPE tail, replicated on every TP rank
  and split only by pipeline stages.
- The fixed-slot layouts: fp8_ds_mla 656 B, DeepSeek V4 584 B for both
  fp8_ds_mla and nvfp4_ds_mla; a non-V4 nvfp4_ds_mla uses the fp8 656 B as a
  conservative stand-in. (sparkrun keys the 584 on model_type; we read the
  model file's `kv_slot_bytes`, which `lanes model describe` fills for V4.)
- compress_ratios: a layer with r > 1 keeps one slot per r tokens.
- nvfp4 KV is 0.5625 bytes per element (fp4 data plus an fp8 scale per 16).
- Weights are split over tp x pp.

Where we differ:

- Sliding-window layers (compress ratio <= 1, or `sliding_window_layers`)
  are sized by the window; sparkrun leaves them out and calls its figure a
  floor. A ratio <= 1 layer with no `sliding_window` is sized as full.
- The indexer cache is sized; sparkrun leaves it out (floor).
- Hybrid linear/attention models are sized (fixed state per sequence);
  sparkrun refuses to size hybrid MLA models.
- GQA heads per rank are max(1, ceil(kv_heads / tp)): engines replicate a KV
  head on every rank when tp > kv_heads; sparkrun divides kv_heads by tp as
  a real number, which under-counts that case (and ceil equals vLLM's
  kv_heads // tp whenever the engine accepts the split).
- `dcp` (decode context parallel) divides the KV; sparkrun has no DCP.
- Slots are whole: ceil(len / r), not len / r.
- We add a per-engine runtime overhead (budget.py); sparkrun counts weights
  and KV only.
- An estimate is a floor here only when the lane adds caches we do not
  size (speculative decoding drafts, from the `floor_args` parameter).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from reconciler.spec.model import Architecture

MLA_LAYOUTS = frozenset({"fp8_ds_mla", "nvfp4_ds_mla"})

KindKey = tuple[str, float]
"""(kind, ratio): kind is full, compressed, sliding or linear; ratio is r for compressed."""

FULL: KindKey = ("full", 1.0)
SLIDING: KindKey = ("sliding", 1.0)
LINEAR: KindKey = ("linear", 1.0)


@dataclass(frozen=True)
class KVParams:
    """The figures the arithmetic needs, from the memory-budget rule's parameters."""

    dtype_bytes: Mapping[str, float]
    slot_bytes: Mapping[str, float]
    min_sequences: int = 1


@dataclass(frozen=True)
class StageKV:
    """The KV bytes one rank of one pipeline stage holds, split by cache."""

    total: int
    parts: Mapping[str, int] = field(default_factory=dict)
    layers: int = 0


def stage_sizes(layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage: the first (layers mod pp) stages hold one more."""
    base, extra = divmod(layers, pp)
    return [base + (1 if stage < extra else 0) for stage in range(pp)]


class KVModel:
    """The KV arithmetic of one model served with one lane's shape.

    Built once per lane; `stage(s, length)` is cheap, so the budget can search
    for the longest max_model_len that fits.
    """

    def __init__(
        self,
        arch: Architecture,
        *,
        tp: int,
        pp: int,
        dcp: int,
        kv_cache_dtype: str,
        params: KVParams,
    ) -> None:
        self.arch = arch
        self.tp = tp
        self.pp = pp
        self.dcp = dcp
        self.seqs = params.min_sequences
        self.notes: list[str] = []
        self.attn_width = self._attention_width(arch, kv_cache_dtype, params)
        self.index_width = (arch.index_head_dim or 0) * arch.index_dtype_bytes
        self.linear_state = math.ceil(arch.linear_state_bytes / tp) if arch.linear_layers else 0
        self.sizes = stage_sizes(arch.layers, pp)
        self._positional: list[dict[KindKey, int]] | None = None
        self._totals: dict[KindKey, int] = {}
        self._plan_layers(arch)

    # -- per-token widths ---------------------------------------------------------------

    def _attention_width(self, arch: Architecture, dtype: str, params: KVParams) -> float:
        if arch.attention == "mla":
            if dtype in MLA_LAYOUTS:
                if arch.kv_slot_bytes is not None:
                    self.notes.append(f"{dtype}: the model's own {arch.kv_slot_bytes} B slot per token per layer")
                    return float(arch.kv_slot_bytes)
                slot = params.slot_bytes[dtype]
                self.notes.append(f"{dtype}: fixed {slot:g} B slot per token per layer")
                return float(slot)
            assert arch.kv_lora_rank is not None
            assert arch.rope_dim is not None
            width = (arch.kv_lora_rank + arch.rope_dim) * params.dtype_bytes[dtype]
            self.notes.append(
                f"MLA latent ({arch.kv_lora_rank}+{arch.rope_dim}) x {params.dtype_bytes[dtype]:g} B "
                f"= {width:g} B per token per layer, whole on every TP rank"
            )
            return width
        assert arch.kv_heads is not None
        assert arch.head_dim is not None
        heads = max(1, math.ceil(arch.kv_heads / self.tp))
        if dtype in MLA_LAYOUTS:
            self.notes.append(f"{dtype} is an MLA layout; this {arch.attention} model is sized at its element width")
        width = 2 * heads * arch.head_dim * params.dtype_bytes[dtype]
        if arch.kv_heads < self.tp:
            self.notes.append(f"{arch.kv_heads} KV heads < tp {self.tp}: one head replicated per rank")
        return width

    # -- which layer is which ---------------------------------------------------------

    def _plan_layers(self, arch: Architecture) -> None:
        if arch.compress_ratios is not None:
            kinds: list[KindKey] = []
            for ratio in arch.compress_ratios:
                if ratio > 1:
                    kinds.append(("compressed", float(ratio)))
                elif arch.sliding_window is not None:
                    kinds.append(SLIDING)
                else:
                    kinds.append(FULL)
            if arch.sliding_window is None and any(r <= 1 for r in arch.compress_ratios):
                self.notes.append("compress ratio <= 1 layers have no sliding_window: sized as full layers")
            if arch.linear_layers or arch.sliding_window_layers:
                self.notes.append("compress_ratios describes every layer; linear/sliding layer counts ignored")
            self._positional = []
            start = 0
            for size in self.sizes:
                counts: dict[KindKey, int] = {}
                for key in kinds[start : start + size]:
                    counts[key] = counts.get(key, 0) + 1
                self._positional.append(counts)
                start += size
            return
        linear = arch.linear_layers
        sliding = 0
        if arch.sliding_window_layers:
            if arch.sliding_window is None:
                self.notes.append("sliding_window_layers without sliding_window: sized as full layers")
            else:
                sliding = min(arch.sliding_window_layers, arch.layers - linear)
        full = arch.layers - linear - sliding
        self._totals = {key: n for key, n in ((FULL, full), (SLIDING, sliding), (LINEAR, linear)) if n}
        if self.pp > 1 and len(self._totals) > 1:
            self.notes.append("layer kinds are counted, not placed: each stage is sized with its costliest layers")

    # -- bytes ------------------------------------------------------------------------

    def _tokens(self, key: KindKey, length: int) -> int:
        kind, ratio = key
        if kind == "compressed":
            slots = math.ceil(length / ratio)
        elif kind == "sliding":
            assert self.arch.sliding_window is not None
            slots = min(length, self.arch.sliding_window)
        else:
            slots = length
        return math.ceil(slots / self.dcp)

    def layer_parts(self, key: KindKey, length: int) -> dict[str, int]:
        """Bytes of one layer of this kind on one rank, by cache, for min_sequences."""
        if key == LINEAR:
            return {"linear": self.linear_state * self.seqs}
        tokens = self._tokens(key, length)
        out = {key[0]: math.ceil(self.attn_width * tokens) * self.seqs}
        if self.index_width and key != SLIDING:
            out["indexer"] = math.ceil(self.index_width * tokens) * self.seqs
        return out

    def _stage_counts(self, stage: int, length: int) -> dict[KindKey, int]:
        if self._positional is not None:
            return self._positional[stage]
        want = self.sizes[stage]
        if not self._totals:
            return {}
        if want >= sum(self._totals.values()):
            return dict(self._totals)
        if len(self._totals) == 1:
            return {next(iter(self._totals)): want}
        costs = sorted(self._totals, key=lambda k: sum(self.layer_parts(k, length).values()), reverse=True)
        counts: dict[KindKey, int] = {}
        for key in costs:
            take = min(want, self._totals[key])
            if take:
                counts[key] = take
                want -= take
        return counts

    def stage(self, stage: int, length: int) -> StageKV:
        parts: dict[str, int] = {}
        counts = self._stage_counts(stage, length)
        for key, count in counts.items():
            for part, value in self.layer_parts(key, length).items():
                parts[part] = parts.get(part, 0) + value * count
        return StageKV(total=sum(parts.values()), parts=parts, layers=sum(counts.values()))

    def longest_fitting(self, stage: int, available: int, upper: int) -> int:
        """The largest max_model_len <= upper whose KV fits in `available` bytes (0 if none)."""
        if self.stage(stage, 1).total > available:
            return 0
        low, high = 1, upper
        while low < high:
            mid = (low + high + 1) // 2
            if self.stage(stage, mid).total <= available:
                low = mid
            else:
                high = mid - 1
        return low
