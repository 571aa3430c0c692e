"""The per-rank memory budget: what one rank needs against what it may use.

This is the first thing lanes refuses a commit for, so it is spelled out as
pure functions over the lane, the model file and the policy figures
(DESIGN.md, "Policy semantics: the per-rank memory budget"):

    weights  = ceil(weight_bytes / (tp x pp))
    kv_min   = KV of the rank's layers for max_model_len x min_sequences (kv.py)
    overhead = overhead_gib[engine]                      (rules.yaml)
    need     = weights + kv_min + overhead
    budget   = gpu_memory_utilization x torch_visible    (hardware.yaml)
    headroom = budget - need

Ranks are the lane's hosts in order, tp ranks per pipeline stage (rank r is
stage r // tp), as vLLM and SGLang number them. Expert parallelism moves
experts between ranks but not the bytes per rank, so `ep` does not appear.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from reconciler.policy.config import RuleSettings
from reconciler.policy.enginekv import kv_settings
from reconciler.policy.hardware import Capacity
from reconciler.policy.kv import KVModel, KVParams
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
        )


@dataclass(frozen=True)
class LaneBudget:
    """A lane's rank budgets, with the KV model kept to explain a denial."""

    lane: Lane
    model: ModelSpec
    kv: KVModel
    ranks: tuple[RankBudget, ...]
    floor_reasons: tuple[str, ...]

    def stage_of(self, rank: int) -> int:
        return min(rank // self.lane.tp, self.lane.pp - 1)


def weights_per_rank(weight_bytes: int, tp: int, pp: int) -> int:
    return math.ceil(weight_bytes / (tp * pp))


def floor_reasons(lane: Lane, floor_args: tuple[str, ...]) -> tuple[str, ...]:
    """Engine arguments that add caches this estimate does not size."""
    return tuple(flag for flag in floor_args if any(arg == flag or arg.startswith(flag + "=") for arg in lane.args))


def lane_budget(
    lane: Lane, model: ModelSpec, capacity_of: Callable[[str], Capacity | None], params: BudgetParams
) -> LaneBudget:
    """Budgets of every rank whose host has a known hardware profile."""
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
    placed = stage_weights(model, partition)
    kv.notes.extend(note for note in (partition.note, *placed.notes) if note)
    weights = placed.per_rank(0, lane.tp)
    overhead = int(params.overhead_gib[lane.engine] * GIB)
    reasons = floor_reasons(lane, params.floor_args)
    notes = list(kv.notes)
    if reasons:
        notes.append(f"floor: {', '.join(reasons)} add draft caches that are not sized")
    stage_kv = {}
    ranks = []
    for rank, host in enumerate(lane.hosts):
        capacity = capacity_of(host)
        if capacity is None:
            continue
        stage = min(rank // lane.tp, lane.pp - 1)
        weights = placed.per_rank(stage, lane.tp)
        if stage not in stage_kv:
            stage_kv[stage] = kv.stage(stage, lane.max_model_len)
        estimate = stage_kv[stage]
        need = weights + estimate.total + overhead
        budget = capacity.budget(lane.gpu_memory_utilization)
        ranks.append(
            RankBudget(
                lane=lane.name,
                rank=rank,
                host=host,
                weights=weights,
                kv_min=estimate.total,
                overhead=overhead,
                need=need,
                budget=budget,
                headroom=budget - need,
                floor=bool(reasons),
                notes=tuple(notes),
                running=lane.running,
                utilization=lane.gpu_memory_utilization,
                capacity=capacity.torch_visible,
                kv_parts=dict(estimate.parts),
            )
        )
    return LaneBudget(lane=lane, model=model, kv=kv, ranks=tuple(ranks), floor_reasons=reasons)


def fix_hint(plan: LaneBudget, rank: RankBudget, boot_cap: float) -> tuple[str, int, float]:
    """What would make a denied rank fit: (sentence, longest fitting max_model_len, utilization needed)."""
    lane = plan.lane
    needed_util = math.ceil(rank.need / rank.capacity * 100) / 100 if rank.capacity else 0.0
    fits = plan.kv.longest_fitting(
        plan.stage_of(rank.rank), rank.budget - rank.weights - rank.overhead, lane.max_model_len
    )
    options = []
    if fits >= 1:
        options.append(f"lower max_model_len to {fits} or less")
    else:
        options.append(
            f"weights and overhead alone need {(rank.weights + rank.overhead) / GIB:.1f} GiB, so spread the "
            "weights over more ranks"
        )
    options.append("raise tp or pp")
    if needed_util <= boot_cap:
        options.append(f"raise gpu_memory_utilization to {needed_util:.2f}")
    text = ", ".join(options[:-1]) + f" or {options[-1]}" if len(options) > 1 else options[0]
    return text, fits, needed_util
