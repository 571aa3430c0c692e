"""KV cache bytes one rank must hold: the architecture-specific half of the budget.

Why this module exists: the per-rank budget is only as good as its KV
figure, and the KV figure depends on the attention kind far more than on
the model size (an MLA latent is ~30x smaller than GQA keys and values, but
it is not sharded by tensor parallelism). Every element width and fixed slot
comes from the `memory-budget` parameters in `policies/rules.yaml`; the
engine's scheduler figures come from enginekv.py; this module does the
arithmetic for one sequence of max_model_len tokens (times min_sequences),
which is what vLLM checks at start (vllm/v1/core/kv_cache_planning.py
check_enough_kv_cache_memory sums every layer's max_memory_usage_bytes).

Per layer and token, on one rank:

- MHA/GQA: 2 x max(1, ceil(kv_heads / tp)) x head_dim x dtype_bytes.
- MLA: (kv_lora_rank + rope_dim) x dtype_bytes, or a fixed slot for the
  fp8_ds_mla / nvfp4_ds_mla layouts (the model's own `kv_slot_bytes`, e.g.
  DeepSeek V4's 584, wins over the layout's default); the same on every TP
  rank.
- Indexer (sparse attention, `index_head_dim` d): an fp8 key plus one fp32
  scale per 128 elements, d + d // 128 x 4 bytes (vllm/model_executor/models/
  deepseek_v2.py Indexer and vllm/models/deepseek_v4/attention.py
  DeepseekV4Indexer: "128 fp8 + 4 fp32 scale = 132", vllm 0.33.0); an MXFP4
  key (index_dtype_bytes 0.5) is d / 2 + d / 32 (one UE8M0 byte per 32). On
  the model's `indexer_layers` when it lists them (the layers that compute
  their own top-k: GLM-5.x keeps one in index_topk_freq, vllm 0.33.0
  vllm/models/deepseek_v32/attention.py builds no Indexer on the others,
  sglang 0.5.23 model_executor/pool_configurator.py
  _compute_dsa_indexer_cell_size counts only those), else on every full
  layer, or with `compress_ratios` only on ratio-4 layers, where DeepSeek V4
  builds it (deepseek_v4/attention.py: `if self.compress_ratio == 4`), at
  that layer's compression; the same on every TP rank.

DeepSeek V4.1 (`kv_source_layers`): ratio 0 is a sliding-window layer, 1
and 2 compressed; only the source layers keep compressed KV, the others
("shared") read it and keep none of their own.

SGLang with `compress_ratios`: its own pool arithmetic (sglangdsv4.py):
padded slots on the layers that own compressed storage, and in place of
per-layer windows the cap-mode sliding-window pool over every layer plus
the compressor state rings, which do not grow with the context.

Per layer, the tokens kept: max_model_len (full layers); ceil(len / r) slots
(DeepSeek V4 layers with compress ratio r > 1); for sliding-window layers
see below. `dcp` splits the tokens of full and compressed caches:
ceil(tokens / dcp) per rank; it never splits a sliding window.

Sliding-window layers (interleaved SWA, `layer_types` 'sliding', or DeepSeek
V4 ratio <= 1): on vLLM, (cdiv(min(window - 1 + in_flight, len), block) + 1)
x block tokens (SlidingWindowSpec.max_admission_blocks_per_request; in_flight
from enginekv.py), and DeepSeek V4 keeps such a window on every layer, its
compressed layers too (deepseek_v4/attention.py builds a DeepseekV4SWACache
per layer). vLLM refuses DCP with sliding-window layers (assertion "DCP not
support sliding window." in vllm/v1/kv_cache_interface.py
SlidingWindowSpec.max_memory_usage_bytes and in
vllm/v1/core/single_type_kv_cache_manager.py SlidingWindowManager, 0.25.1 to
0.33.0): `refusals` carries it for the rules. Other engines: min(len, window).

Linear/recurrent layers keep `linear_state_bytes` per sequence, split over tp
(ceil); on vLLM a hybrid model's groups share one padded page size
(hybridkv.py).

Pipeline stages: the engine's own split (stages.py). With `compress_ratios`
or `layer_types` each stage sums its own layers; otherwise (sliding or
linear layers counted, not placed) a stage is assumed to hold the most
expensive layers it could: an upper bound for that stage, exact for pp = 1.

Compared with sparkrun (spark-arena/sparkrun, models/vram.py and
models/kv/mla.py, read 2026-10): the same MLA latent and fixed slots, the
same compress-ratio slots and nvfp4 width (0.5625 B per element); sparkrun
leaves out sliding layers, the indexer, hybrid state, DCP and the per-engine
overhead, divides kv_heads by tp as a real number, and does not round slots
up. An estimate is a floor here only when the lane adds caches we do not
size (speculative decoding drafts, from the `floor_args` parameter).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from reconciler.policy.dsv4pages import (
    STATE_ROWS,
    DSV4Pages,
    compressed_bytes,
    compressor_bytes,
    dsv4_pages,
    indexer_bytes,
    sliding_bytes,
)
from reconciler.policy.enginekv import KVSettings
from reconciler.policy.hybridkv import group_size, unified_block, unified_page
from reconciler.policy.sglangdsv4 import DSV4Pool, DSV4Settings, dsv4_pool, fp4_index_bytes, padded_slot, slot_bytes
from reconciler.policy.stages import vllm_split
from reconciler.policy.windowkv import compressor_state_bytes, reserved_tokens
from reconciler.spec.model import Architecture

MLA_LAYOUTS = frozenset({"fp8_ds_mla", "nvfp4_ds_mla"})
INDEXER_RATIO = 4.0  # DeepSeek V4 builds its indexer on ratio-4 layers only
MAX_FILL_ORDERS = 120
"""Orders of filling a counted hybrid's stage with its attention kinds tried (5 kinds: every order)."""

KindKey = tuple[str, float, bool]
"""(kind, ratio, indexed): kind is full, compressed, shared (a V4.1 layer reading another's compressed KV),
sliding or linear; ratio is r for compressed; indexed: the layer keeps an indexer cache."""

FULL: KindKey = ("full", 1.0, False)
INDEXED_FULL: KindKey = ("full", 1.0, True)
SLIDING: KindKey = ("sliding", 1.0, False)
LINEAR: KindKey = ("linear", 1.0, False)
NONE: KindKey = ("none", 1.0, False)  # a layer with no cache (Nemotron-H's MoE/MLP layers): placed, never sized
DCP_SLIDING = "dcp-sliding-window"


@dataclass(frozen=True)
class KVParams:
    """The figures the arithmetic needs, from the memory-budget rule's parameters."""

    dtype_bytes: Mapping[str, float]
    slot_bytes: Mapping[str, float]
    min_sequences: int = 1


@dataclass(frozen=True)
class KVRefusal:
    """A shape the engine refuses to start with: `code` for the rules, `message` for people."""

    code: str
    message: str
    source: str


@dataclass(frozen=True)
class StageKV:
    """The KV bytes one rank of one pipeline stage holds, split by cache."""

    total: int
    parts: Mapping[str, int] = field(default_factory=dict)
    layers: int = 0


def stage_sizes(layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage as vLLM cuts them (stages.vllm_split)."""
    return list(vllm_split(layers, pp))


def has_sliding_layers(arch: Architecture) -> bool:
    """Whether any layer keeps a sliding-window cache (DeepSeek V4: its ratio <= 1 layers, on vLLM all of them)."""
    if arch.sliding_window is None:
        return False
    if arch.compress_ratios is not None:
        return True  # vLLM builds a DeepseekV4SWACache on every layer
    if arch.layer_types is not None:
        return "sliding" in arch.layer_types
    return arch.sliding_window_layers > 0


def dcp_sliding_refusal(arch: Architecture, engine: str, dcp: int) -> KVRefusal | None:
    """vLLM's refusal of DCP on a model with sliding-window layers, or None when it does not apply."""
    if dcp <= 1 or engine != "vllm" or not has_sliding_layers(arch):
        return None
    return KVRefusal(
        code=DCP_SLIDING,
        message=(
            f"vLLM does not start with dcp {dcp} on a model with sliding-window layers "
            "(it asserts 'DCP not support sliding window'); set dcp 1"
        ),
        source="vllm/v1/kv_cache_interface.py SlidingWindowSpec.max_memory_usage_bytes (vllm 0.25.1 to 0.33.0)",
    )


def indexer_token_bytes(arch: Architecture) -> float:
    """Bytes per indexer slot: the key plus its scales (vLLM's DeepSeek V3.2/V4 indexer caches)."""
    dim = arch.index_head_dim or 0
    if arch.index_dtype_bytes == 1.0:
        return float(dim + dim // 128 * 4)  # fp8 key + one fp32 scale per 128 elements
    if arch.index_dtype_bytes == 0.5:
        return float(dim // 2 + dim // 32)  # MXFP4: two values a byte + one UE8M0 byte per 32
    return dim * arch.index_dtype_bytes


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
        settings: KVSettings | None = None,
        partition: Sequence[int] | None = None,
    ) -> None:
        self.arch = arch
        self.tp = tp
        self.pp = pp
        self.dcp = dcp
        self.seqs = params.min_sequences
        self.settings = settings if settings is not None else KVSettings()
        self.notes: list[str] = list(self.settings.notes)
        self.refusals: list[KVRefusal] = []
        self.attn_width = self._attention_width(arch, kv_cache_dtype, params)
        self.index_width = indexer_token_bytes(arch) if arch.index_head_dim else 0.0
        self.linear_state = math.ceil(arch.linear_state_bytes / tp) if arch.linear_state_bytes else 0
        self.sizes = list(partition) if partition is not None else stage_sizes(arch.layers, pp)
        if len(self.sizes) != pp or sum(self.sizes) != arch.layers:
            raise ValueError(f"partition {self.sizes} does not cut {arch.layers} layers into {pp} stages")
        self.vllm = self.settings.engine == "vllm"
        # DeepSeek V4 on vLLM: a sliding window on every layer, beside the compressed cache.
        self.window_everywhere = self.vllm and arch.compress_ratios is not None and arch.sliding_window is not None
        # vLLM's DeepSeek V4 pages under fp8_ds_mla are 576 B-aligned and shared by bucket (dsv4pages.py).
        self.pages: DSV4Pages | None = None
        if self.window_everywhere and kv_cache_dtype == "fp8_ds_mla":
            head = (arch.kv_lora_rank or 0) + (arch.rope_dim or 0)
            self.pages = dsv4_pages(int(self.attn_width), self.index_width, head, arch.index_head_dim)
        self.dsv4: DSV4Settings | None = self.settings.dsv4 if arch.compress_ratios is not None else None
        if self.dsv4 is not None:
            self.attn_width = float(slot_bytes(arch))
            self.notes.append(
                f"SGLang's DeepSeek V4 pool keeps a {self.attn_width:g} B FlashMLA slot whatever the KV dtype"
            )
        self._positional: list[dict[KindKey, int]] | None = None
        self._totals: dict[KindKey, int] = {}
        self._plan_layers(arch)
        self._check_dcp()

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

    def _indexed(self, layer: int, ratio: float | None) -> bool:
        """Whether this layer keeps an indexer cache (ratio None: not a DeepSeek V4 layer)."""
        if not self.index_width:
            return False
        if self.arch.indexer_layers is not None:
            return layer in self.arch.indexer_layers
        return ratio is None or ratio == INDEXER_RATIO

    def _layer_kinds(self, arch: Architecture) -> list[KindKey] | None:
        if arch.compress_ratios is not None:
            kinds: list[KindKey] = []
            sources = arch.kv_source_layers
            low = 0.0 if sources is not None else 1.0  # V4.1: only ratio 0 is SWA-only
            for layer, ratio in enumerate(arch.compress_ratios):
                if ratio > low:
                    if sources is not None and ratio in (1, 2) and layer not in sources:
                        kinds.append(("shared", float(ratio), False))
                    else:
                        kinds.append(("compressed", float(ratio), self._indexed(layer, float(ratio))))
                elif arch.sliding_window is not None:
                    kinds.append(SLIDING)
                else:
                    kinds.append(INDEXED_FULL if self._indexed(layer, None) else FULL)
            if arch.sliding_window is None and any(r <= 1 for r in arch.compress_ratios):
                self.notes.append("compress ratio <= 1 layers have no sliding_window: sized as full layers")
            if arch.linear_layers or arch.sliding_window_layers or arch.layer_types:
                self.notes.append("compress_ratios describes every layer; layer_types and layer counts ignored")
            return kinds
        if arch.layer_types is not None:
            if arch.linear_layers or arch.sliding_window_layers:
                self.notes.append("layer_types describes every layer; linear/sliding layer counts ignored")
            out = []
            for layer, kind in enumerate(arch.layer_types):
                if kind == "none":
                    out.append(NONE)
                elif kind == "linear":
                    out.append(LINEAR)
                elif kind == "sliding" and arch.sliding_window is not None:
                    out.append(SLIDING)
                else:
                    out.append(INDEXED_FULL if self._indexed(layer, None) else FULL)
            if arch.sliding_window is None and "sliding" in arch.layer_types:
                self.notes.append("sliding layers without sliding_window: sized as full layers")
            return out
        return None

    def _plan_layers(self, arch: Architecture) -> None:
        kinds = self._layer_kinds(arch)
        if kinds is not None:
            self._positional = []
            start = 0
            for size in self.sizes:
                counts: dict[KindKey, int] = {}
                for key in kinds[start : start + size]:
                    if key != NONE:
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
        indexed = 0
        if self.index_width:
            indexed = full if arch.indexer_layers is None else min(full, len(arch.indexer_layers))
        counted = ((INDEXED_FULL, indexed), (FULL, full - indexed), (SLIDING, sliding), (LINEAR, linear))
        self._totals = {key: n for key, n in counted if n}
        if self.pp > 1 and len(self._totals) > 1:
            self.notes.append("layer kinds are counted, not placed: each stage is sized with its costliest layers")

    def _check_dcp(self) -> None:
        refusal = dcp_sliding_refusal(self.arch, self.settings.engine, self.dcp)
        if refusal is not None:
            self.refusals.append(refusal)

    # -- tokens and blocks --------------------------------------------------------------

    def _sliding_tokens(self, length: int, block: int) -> int:
        """Tokens a sliding-window layer reserves for one sequence (never split by dcp)."""
        assert self.arch.sliding_window is not None
        return reserved_tokens(self.arch.sliding_window, self.settings.in_flight_tokens, length, block)

    def _tokens(self, key: KindKey, length: int) -> int:
        kind, ratio, _ = key
        if kind == "sliding":
            return self._sliding_tokens(length, self.settings.block_size)
        slots = math.ceil(length / ratio) if kind == "compressed" else length
        return math.ceil(slots / self.dcp)

    def layer_parts(self, key: KindKey, length: int) -> dict[str, int]:
        """Bytes of one layer of this kind on one rank, by cache, for min_sequences."""
        if key == LINEAR:
            return {"linear": self.linear_state * self.settings.linear_blocks * self.seqs}
        kind, ratio, indexed = key
        if self.dsv4 is not None:
            return self._sglang_layer_parts(key, length)
        if self.pages is not None and kind in ("compressed", "shared", "sliding"):
            return self._paged_parts(key, length, self.pages)
        out: dict[str, int] = {}
        if kind != "shared":
            tokens = self._tokens(key, length)
            out[kind] = math.ceil(self.attn_width * tokens) * self.seqs
            if indexed and self.index_width:
                out["indexer"] = math.ceil(self.index_width * tokens) * self.seqs
        if kind in ("compressed", "shared") and self.window_everywhere:
            window = self._sliding_tokens(length, self.settings.block_size)
            out["sliding"] = math.ceil(self.attn_width * window) * self.seqs
            head = (self.arch.kv_lora_rank or 0) + (self.arch.rope_dim or 0)
            state = compressor_state_bytes(
                ratio, head, self.arch.index_head_dim, self.settings.in_flight_tokens, length
            )
            if state and kind == "compressed":
                out["compressor"] = state * self.seqs
        return out

    def _paged_parts(self, key: KindKey, length: int, pages: DSV4Pages) -> dict[str, int]:
        """A DeepSeek V4 layer on vLLM with fp8_ds_mla, in whole padded pages (dsv4pages.py)."""
        kind, ratio, indexed = key
        window = self._sliding_tokens(length, self.settings.block_size)
        out = {"sliding": sliding_bytes(pages, window) * self.seqs}
        if kind != "compressed":
            return out
        tokens = math.ceil(length / self.dcp)
        out["compressed"] = compressed_bytes(pages, ratio, tokens) * self.seqs
        if indexed and self.index_width:
            out["indexer"] = indexer_bytes(pages, tokens) * self.seqs
        rows_per_block = STATE_ROWS.get(ratio)
        if rows_per_block is not None:
            coff = 2 if ratio == 4.0 else 1
            rows = reserved_tokens(coff * int(ratio), self.settings.in_flight_tokens, length, rows_per_block)
            state = compressor_bytes(pages, ratio, rows, bool(self.arch.index_head_dim))
            out["compressor"] = state * self.seqs
        return out

    # -- SGLang's DeepSeek V4 pool ------------------------------------------------------

    def _sglang_layer_parts(self, key: KindKey, length: int) -> dict[str, int]:
        """A layer's own compressed slots (padded as SGLang pages them) and indexer keys; windows are pooled."""
        kind, ratio, indexed = key
        if kind != "compressed":
            return {}
        slots = math.ceil(math.ceil(length / ratio) / self.dcp)
        out = {"compressed": math.ceil(padded_slot(self.attn_width, ratio) * slots) * self.seqs}
        if indexed and self.index_width:
            out["indexer"] = math.ceil(self._sglang_index_width(ratio) * slots) * self.seqs
        return out

    def _sglang_index_width(self, ratio: float) -> float:
        """SGLang keeps the ratio-1/2 indexer keys in MXFP4 whatever the ratio-4 indexer uses."""
        if ratio in (1.0, 2.0) and self.arch.index_head_dim:
            return float(fp4_index_bytes(self.arch.index_head_dim))
        return self.index_width

    def dsv4_pool(self, stage: int) -> DSV4Pool:
        """SGLang's split of this stage's pool (only for SGLang lanes of a DeepSeek V4 model)."""
        assert self.dsv4 is not None
        counts = self._stage_counts(stage, 1)
        return dsv4_pool(counts, self.arch, self.attn_width, self.index_width, self.dsv4)

    def pool_tokens(self, stage: int, pool: int) -> int | None:
        """Tokens the engine's pool of `pool` bytes holds, where lanes knows how the engine counts them."""
        if self.dsv4 is None:
            return None
        return self.dsv4_pool(stage).tokens(pool)

    # -- vLLM hybrid models: one page size for every layer group ------------------------

    def _hybrid_parts(self, counts: Mapping[KindKey, int], length: int) -> dict[str, int]:
        """vLLM's allocation for one sequence of a hybrid stage: groups of equal layers, pages of one size."""
        token = self.attn_width
        block = unified_block(token, self.linear_state, self.settings.block_size, self.arch.attention == "mla")
        page = unified_page(token, self.linear_state, block)
        group = group_size(counts.values())
        parts: dict[str, int] = {}
        for key, count in counts.items():
            groups = math.ceil(count / group)
            if key == LINEAR:
                blocks = self.settings.linear_blocks
            elif key == SLIDING:
                blocks = math.ceil(self._sliding_tokens(length, block) / block)
            else:
                slots = math.ceil(length / key[1]) if key[0] == "compressed" else length
                blocks = math.ceil(math.ceil(slots / self.dcp) / block)
            parts[key[0]] = parts.get(key[0], 0) + groups * group * page * blocks * self.seqs
        return parts

    # -- bytes ------------------------------------------------------------------------

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

    def _parts(self, counts: Mapping[KindKey, int], length: int) -> dict[str, int]:
        if self.settings.unify_pages and LINEAR in counts and len(counts) > 1:
            return self._hybrid_parts(counts, length)
        parts: dict[str, int] = {}
        for key, count in counts.items():
            for part, value in self.layer_parts(key, length).items():
                parts[part] = parts.get(part, 0) + value * count
        return parts

    def _padded_upper_bound(self, stage: int, length: int) -> dict[KindKey, int]:
        """Counted hybrid layers under page padding: the costliest mix of linear and attention layers."""
        want = self.sizes[stage]
        linear = self._totals.get(LINEAR, 0)
        others = {k: n for k, n in self._totals.items() if k != LINEAR}
        best: dict[KindKey, int] = {}
        best_total = -1
        # Every order of filling the other kinds, not the order of their cost at this length: which mixes are
        # tried must not depend on the length, or the bound could shrink as the length grows (a property test
        # found a 3-layer model whose stage cost less at 4,112 tokens than at 1). A maximum over one fixed
        # family of mixes, each growing with the length, grows with it. Few kinds: at most a few dozen orders.
        orders = list(itertools.islice(itertools.permutations(sorted(others, key=repr)), MAX_FILL_ORDERS))
        for take in range(max(0, want - sum(others.values())), min(want, linear) + 1):
            for order in orders:
                counts = {LINEAR: take} if take else {}
                rest = want - take
                for key in order:
                    if rest and others[key]:
                        counts[key] = min(rest, others[key])
                        rest -= counts[key]
                total = sum(self._parts(counts, length).values())
                if total > best_total:
                    best, best_total = counts, total
        return best

    def stage(self, stage: int, length: int) -> StageKV:
        if (
            self._positional is None
            and self.settings.unify_pages
            and LINEAR in self._totals
            and len(self._totals) > 1
            and self.sizes[stage] < sum(self._totals.values())
        ):
            counts = self._padded_upper_bound(stage, length)
        else:
            counts = {k: n for k, n in self._stage_counts(stage, length).items() if n}
        parts = self._parts(counts, length)
        if self.dsv4 is not None:
            for part, value in self.dsv4_pool(stage).fixed.items():
                parts[part] = parts.get(part, 0) + value
        return StageKV(total=sum(parts.values()), parts=parts, layers=sum(counts.values()))

    def longest_fitting(self, stage: int, available: int, upper: int) -> int:
        """The largest max_model_len <= upper whose KV fits in `available` bytes (0 if none)."""
        if self.stage(stage, 1).total > available:
            return 0
        if upper >= 1 and self.stage(stage, upper).total <= available:
            # The KV of a stage does not shrink as the length grows (what the search below relies on, and
            # tests/policy/test_kv_properties.py checks): the whole range fits. Most ranks' lengths do, and
            # this is two sizings instead of about seventeen. (A counted hybrid split into pipeline stages
            # under page padding broke that rule until its bound tried one fixed family of mixes: see
            # `_padded_upper_bound`.)
            return upper
        low, high = 1, upper
        while low < high:
            mid = (low + high + 1) // 2
            if self.stage(stage, mid).total <= available:
                low = mid
            else:
                high = mid - 1
        return low
