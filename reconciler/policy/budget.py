"""The per-rank memory budget: what one rank needs against what its engine gives it.

Pure functions over the lane, the model file, the policy figures and (when
a probe saw them) the hosts' free memory. Each engine reads its memory flag
its own way (engine_memory.py), so the figures are in that engine's terms:

    weights  = the rank's stage of the resident weights (weight_bytes less the lane's
               offloaded_weight_bytes) as the engine cuts stages, split over tp (stages.py)
    kv_min   = KV of the rank's layers for max_model_len x min_sequences (kv.py)
    drafter  = speculative decoding: the drafter's weights (rules.yaml, per
               method) + the KV of one draft layer as its engine sizes it
               (draft_layer_kv)
    overhead = activations, CUDA graphs, runtime (rules.yaml, per engine and
               model class)

    vLLM   budget = ceil(gpu_memory_utilization x torch_visible)
           need   = weights + kv_min + drafter + overhead
           (--kv-cache-memory-bytes X: kv = X, budget = free at boot)
    SGLang base   = free at boot, the minimum over the lane's hosts
           budget = mem_fraction_static x base
           need   = weights + kv_min + drafter
           remainder = base - budget, which must hold the overhead
           (--max-total-tokens T caps the pool at T tokens)

    headroom = budget - need
    pool     = what the engine gives the KV cache: budget - everything else
    context  = the longest max_model_len that pool holds (capped at the lane's)

Ranks are the lane's hosts in order, tp ranks per pipeline stage (rank r is
stage r // tp), as vLLM and SGLang number them. Expert parallelism moves
experts between ranks but not the bytes per rank, so `ep` does not appear.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from reconciler.policy.config import RuleSettings
from reconciler.policy.engine_memory import (
    SEMANTICS,
    MemorySemantics,
    Speculation,
    arg_value,
    human_int,
    speculation,
    utilization,
)
from reconciler.policy.enginekv import kv_settings
from reconciler.policy.hardware import HARDWARE_PATH, Capacity
from reconciler.policy.hostmem import BootFree, HostMemory, boot_free
from reconciler.policy.kv import FULL, INDEXED_FULL, SLIDING, KVModel, KVParams
from reconciler.policy.stages import pp_partition, stage_weights
from reconciler.policy.verdict import GIB, RankBudget
from reconciler.spec.lane import Lane
from reconciler.spec.model import ModelSpec


@dataclass(frozen=True)
class BudgetParams:
    kv: KVParams
    overhead_gib: dict[str, float]
    headroom_warn: int
    floor_args: tuple[str, ...]
    drafter_gib: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_rule(cls, rule: RuleSettings) -> BudgetParams:
        return cls(
            kv=KVParams(
                dtype_bytes=dict(rule.numbers("kv_dtype_bytes")),
                slot_bytes=dict(rule.numbers("mla_slot_bytes")),
                min_sequences=rule.integer("min_sequences"),
            ),
            overhead_gib=dict(rule.numbers("overhead_gib")),
            headroom_warn=int(rule.number("headroom_warn_gib") * GIB),
            floor_args=rule.strings("floor_args"),
            drafter_gib=dict(rule.numbers("drafter_gib")),
        )


def model_classes(model: ModelSpec) -> tuple[str, ...]:
    """The classes an overhead figure may be keyed on, most specific first."""
    arch = model.architecture
    out = []
    if arch.linear_layers:
        out.append("hybrid")
    if arch.attention == "mla":
        out.append("mla")
    out.append("moe" if model.moe is not None else "dense")
    return tuple(out)


def overhead_bytes(params: BudgetParams, engine: str, model: ModelSpec) -> tuple[int, str]:
    """(bytes, the key it came from): `<engine>.<class>` when rules.yaml has one, else `<engine>`."""
    for cls in model_classes(model):
        key = f"{engine}.{cls}"
        if key in params.overhead_gib:
            return int(params.overhead_gib[key] * GIB), key
    return int(params.overhead_gib[engine] * GIB), engine


@dataclass(frozen=True)
class LaneBudget:
    """A lane's rank budgets, with what is needed to explain a denial."""

    lane: Lane
    model: ModelSpec
    kv: KVModel
    ranks: tuple[RankBudget, ...]
    floor_reasons: tuple[str, ...]
    semantics: MemorySemantics
    utilization: float
    speculation: Speculation | None = None
    kv_tokens_cap: int | None = None
    """SGLang --max-total-tokens: the pool holds at most this many tokens."""
    kv_bytes: int | None = None
    """vLLM --kv-cache-memory-bytes: the KV cache is exactly this."""

    def stage_of(self, rank: int) -> int:
        return min(rank // self.lane.tp, self.lane.pp - 1)


def floor_reasons(lane: Lane, floor_args: tuple[str, ...], spec: Speculation | None, sized: bool) -> tuple[str, ...]:
    """Engine arguments that add caches this estimate does not size (a drafter of unknown method)."""
    if spec is not None and sized:
        return ()
    return tuple(flag for flag in floor_args if any(arg == flag or arg.startswith(flag + "=") for arg in lane.args))


def _explicit_kv(lane: Lane, sem: MemorySemantics) -> tuple[int | None, int | None, list[str]]:
    notes: list[str] = []
    kv_bytes = tokens = None
    if sem.kv_bytes_flag is not None:
        raw = arg_value(lane.args, sem.kv_bytes_flag)
        if raw is not None:
            kv_bytes = human_int(raw)
            if kv_bytes is None:
                notes.append(f"{sem.kv_bytes_flag} {raw!r} is not a byte count vLLM reads: ignored here")
    if sem.kv_tokens_flag is not None:
        raw = arg_value(lane.args, sem.kv_tokens_flag)
        if raw is not None:
            tokens = int(raw) if raw.strip().isdigit() else None
            if tokens is None:
                notes.append(f"{sem.kv_tokens_flag} {raw!r} is not a token count: ignored here")
    return kv_bytes, tokens, notes


def draft_layer_kv(kv: KVModel, engine: str, length: int) -> tuple[int, str]:
    """(bytes, how) of one MTP/EAGLE draft layer's KV for one max_model_len sequence, as the engine sizes it.

    vLLM 0.33.0 gives the draft layer a cache of its own kind: a DeepSeek V4 MTP layer is SWA-only
    (vllm/models/deepseek_v4/attention.py sets compress_ratio 1 past num_hidden_layers, whatever
    compress_ratios' extra entry says), a DeepSeek V3.2/GLM-5 MTP layer always builds its indexer
    (vllm/models/deepseek_v32/attention.py is_mtp_layer), anything else one full attention layer.
    SGLang 0.5.23 scales the target's per-token cost instead (model_executor/pool_configurator.py): on
    DeepSeek V4 every per-token figure by (T + 1) / T (DSV4PoolConfigurator, T target layers); on a DSA
    model one latent layer plus an indexer on the draft layer (allocate_all_layers); otherwise the
    target's cell size x draft layers / layers, an average layer.
    """
    arch = kv.arch
    if engine == "vllm":
        if arch.compress_ratios is not None and arch.sliding_window is not None:
            return sum(kv.layer_parts(SLIDING, length).values()), "one sliding-window layer (vLLM's V4 MTP layer)"
        if arch.index_head_dim and arch.compress_ratios is None:
            return sum(kv.layer_parts(INDEXED_FULL, length).values()), "one attention layer with its indexer"
        return sum(kv.layer_parts(FULL, length).values()), "one attention layer"
    if engine == "sglang":
        if arch.compress_ratios is not None:
            stage = kv.stage(0, length)
            grows = stage.total - stage.parts.get("compressor", 0)
            return math.ceil(grows / max(stage.layers, 1)), "the target's KV x 1 / T (SGLang's (T + 1) / T)"
        if arch.index_head_dim:
            return sum(kv.layer_parts(INDEXED_FULL, length).values()), "one latent layer with its indexer"
        stage = kv.stage(0, length)
        return math.ceil(stage.total / max(stage.layers, 1)), "an average layer of the target (SGLang's cell share)"
    return sum(kv.layer_parts(FULL, length).values()), "one attention layer"


def _drafter(params: BudgetParams, spec: Speculation | None, layer_kv: tuple[int, str]) -> tuple[int, bool, str]:
    """(bytes per rank, whether it is sized, a note) for the lane's speculative decoding."""
    if spec is None:
        return 0, True, ""
    if spec.family not in params.drafter_gib:
        return 0, False, f"speculative method {spec.method} ({spec.family}) has no drafter figure: not sized"
    weights = int(params.drafter_gib[spec.family] * GIB)
    kv, how = layer_kv if spec.family in ("mtp", "eagle") else (0, "")
    return (
        weights + kv,
        True,
        f"drafter {spec.method} ({spec.family}): {weights / GIB:.1f} GiB (rules.yaml drafter_gib) + "
        f"{how or 'no'} KV {kv / GIB:.2f} GiB",
    )


def budget_reads(
    lane: Lane, capacity_of: Callable[[str], Capacity | None], host_memory: Mapping[str, HostMemory] | None
) -> tuple[BootFree, ...]:
    """What `lane_budget` reads of the probe: the free memory at boot of each of the lane's hosts with a known
    profile (figure, origin and the source it names). Equal values give an equal budget (`policy.reuse`)."""
    observed = host_memory or {}
    return tuple(boot_free(host, cap, observed) for host in lane.hosts if (cap := capacity_of(host)) is not None)


def lane_budget(
    lane: Lane,
    model: ModelSpec,
    capacity_of: Callable[[str], Capacity | None],
    params: BudgetParams,
    host_memory: Mapping[str, HostMemory] | None = None,
) -> LaneBudget:
    """Budgets of every rank whose host has a known hardware profile."""
    observed = host_memory or {}
    sem = SEMANTICS[lane.engine]
    util = utilization(lane.args, sem, lane.gpu_memory_utilization)
    partition = pp_partition(model.architecture.layers, lane.pp, lane.engine, lane.env)
    kv = KVModel(
        model.architecture,
        tp=lane.tp,
        pp=lane.pp,
        dcp=lane.dcp,
        kv_cache_dtype=lane.kv_cache_dtype,
        params=params.kv,
        settings=kv_settings(lane, model.architecture),
        partition=partition.sizes,
    )
    # Weights per stage as the engine cuts them (stages.py): uneven layers, embedding first, LM head last.
    placed = stage_weights(model, partition, lane.offloaded_weight_bytes)
    kv.notes.extend(note for note in (partition.note, *placed.notes) if note)
    weights = placed.per_rank(0, lane.tp)
    overhead, overhead_key = overhead_bytes(params, lane.engine, model)
    spec = speculation(lane.engine, lane.args)
    kv_bytes, kv_tokens, notes = _explicit_kv(lane, sem)
    notes = [*kv.notes, *notes, f"overhead {overhead / GIB:g} GiB: rules.yaml overhead_gib.{overhead_key}"]
    if lane.offloaded_weight_bytes:
        notes.append(f"{lane.offloaded_weight_bytes / GIB:.1f} GiB of weights stay off the GPU (the lane says so)")
    hosts = [(rank, host, capacity_of(host)) for rank, host in enumerate(lane.hosts)]
    known = [(rank, host, cap) for rank, host, cap in hosts if cap is not None]
    boots = {host: boot_free(host, cap, observed) for _, host, cap in known}
    # SGLang takes the minimum free memory over all ranks (get_available_gpu_memory(distributed=True)).
    lane_min = min(boots.values(), key=lambda b: b.bytes) if boots else None
    drafter, sized, drafter_note = _drafter(params, spec, draft_layer_kv(kv, lane.engine, lane.max_model_len))
    stage_kv = {}
    stage_parts: dict[int, Mapping[str, int]] = {}
    # One notes tuple and one KV split per stage, shared by the lane's ranks: they are equal, and at 1,000
    # ranks a copy each was about 1 MB of the daemon's memory (issue 27).
    rank_notes = (*notes, drafter_note) if drafter_note else tuple(notes)
    ranks = []
    for rank, host, capacity in known:
        stage = min(rank // lane.tp, lane.pp - 1)
        weights = placed.per_rank(stage, lane.tp)
        if stage not in stage_kv:
            stage_kv[stage] = kv.stage(stage, lane.max_model_len)
            stage_parts[stage] = dict(stage_kv[stage].parts) if kv_bytes is None else {"explicit": kv_bytes}
        estimate = stage_kv[stage]
        boot = boots[host]
        figures = _engine_figures(sem, util, capacity, boot, lane_min, kv_bytes)
        kv_figure = kv_bytes if kv_bytes is not None else estimate.total
        inside = overhead if sem.covers_overhead else 0
        need = weights + kv_figure + drafter + inside
        pool = kv_bytes if kv_bytes is not None else figures.budget - weights - drafter - inside
        context = _context(kv, stage, pool, kv_tokens, lane.max_model_len)
        ranks.append(
            RankBudget(
                lane=lane.name,
                rank=rank,
                host=host,
                weights=weights,
                kv_min=kv_figure,
                overhead=overhead,
                need=need,
                budget=figures.budget,
                headroom=figures.budget - need,
                floor=not sized,
                notes=rank_notes,
                running=lane.running,
                utilization=util,
                capacity=capacity.torch_visible,
                kv_parts=stage_parts[stage],
                engine=lane.engine,
                flag=figures.flag,
                base=figures.base,
                base_bytes=figures.base_bytes,
                base_origin=figures.base_origin,
                base_source=figures.base_source,
                boot_free=boot.bytes,
                boot_free_origin=boot.origin,
                boot_free_source=boot.source,
                observed_at=boot.observed_at,
                overhead_inside=sem.covers_overhead,
                remainder=0 if sem.covers_overhead else figures.base_bytes - figures.budget,
                drafter=drafter,
                kv_source=_kv_source(sem, kv_bytes, kv_tokens),
                pool=max(pool, 0),
                context=context,
                pool_tokens=None if kv_bytes is not None else kv.pool_tokens(stage, max(pool, 0)),
            )
        )
    return LaneBudget(
        lane=lane,
        model=model,
        kv=kv,
        ranks=tuple(ranks),
        floor_reasons=floor_reasons(lane, params.floor_args, spec, sized),
        semantics=sem,
        utilization=util,
        speculation=spec,
        kv_tokens_cap=kv_tokens,
        kv_bytes=kv_bytes,
    )


@dataclass(frozen=True)
class _Figures:
    budget: int
    flag: str
    base: str
    base_bytes: int
    base_origin: str
    base_source: str


def _engine_figures(
    sem: MemorySemantics,
    util: float,
    capacity: Capacity,
    boot: BootFree,
    lane_min: BootFree | None,
    kv_bytes: int | None,
) -> _Figures:
    if kv_bytes is not None:
        # vLLM: the fraction no longer bounds what it allocates; what is free at start does.
        return _Figures(boot.bytes, sem.kv_bytes_flag or sem.flag, "boot_free", boot.bytes, boot.origin, boot.source)
    if sem.fraction_of == "boot_free":
        base = lane_min or boot
        return _Figures(int(util * base.bytes), sem.flag, "boot_free", base.bytes, base.origin, base.source)
    # vllm/v1/worker/utils.py request_memory: math.ceil(total_memory x gpu_memory_utilization).
    return _Figures(
        math.ceil(util * capacity.torch_visible),
        sem.flag,
        "torch_visible",
        capacity.torch_visible,
        "profile",
        _profile_source(capacity),
    )


@functools.lru_cache(maxsize=64)
def _profile_source(capacity: Capacity) -> str:
    """One string per hardware profile (a fleet has a few), not one per rank."""
    return f"{HARDWARE_PATH} {capacity.profile}.torch_visible ({capacity.torch_visible / GIB:.1f} GiB)"


def _kv_source(sem: MemorySemantics, kv_bytes: int | None, kv_tokens: int | None) -> str:
    if kv_bytes is not None and sem.kv_bytes_flag:
        return sem.kv_bytes_flag
    if kv_tokens is not None and sem.kv_tokens_flag:
        return sem.kv_tokens_flag
    return "max_model_len"


def _context(kv: KVModel, stage: int, pool: int, tokens_cap: int | None, max_model_len: int) -> int:
    """The longest max_model_len (min_sequences of them) the pool holds, capped at the lane's own."""
    fits = kv.longest_fitting(stage, pool, max_model_len) if pool > 0 else 0
    if tokens_cap is not None:
        fits = min(fits, tokens_cap // kv.seqs)
    return fits
