"""What would make a denied lane fit, naming only levers that work for its attention kind and engine.

Why a module of its own: the cheapest wrong advice is "raise tp". For GQA it
splits the KV heads over more ranks; for MLA the latent cache is whole on
every TP rank (kv.py), so only decode context parallelism (`dcp`, which
splits the cache's tokens over the TP group) or fewer layers per rank
(`pp`) shrinks it. Each lever is tried with the same KV arithmetic the
budget uses, so an offered value is one that fits.
"""

from __future__ import annotations

import math

from reconciler.policy.budget import BudgetParams, LaneBudget
from reconciler.policy.kv import KVModel
from reconciler.policy.verdict import GIB, DetailValue, RankBudget


def _kv_room(rank: RankBudget) -> int:
    """Bytes the KV cache may take on this rank: the budget minus everything else."""
    inside = rank.overhead if rank.overhead_inside else 0
    return rank.budget - rank.weights - rank.drafter - inside


def _has_sliding_layers(plan: LaneBudget) -> bool:
    arch = plan.model.architecture
    if arch.sliding_window is None:
        return False
    ratios = arch.compress_ratios or ()
    return arch.sliding_window_layers > 0 or any(r <= 1 for r in ratios)


def _variant(plan: LaneBudget, params: BudgetParams, *, dcp: int | None = None, dtype: str | None = None) -> KVModel:
    lane = plan.lane
    return KVModel(
        plan.model.architecture,
        tp=lane.tp,
        pp=lane.pp,
        dcp=dcp if dcp is not None else lane.dcp,
        kv_cache_dtype=dtype if dtype is not None else lane.kv_cache_dtype,
        params=params.kv,
        settings=plan.kv.settings,
        partition=plan.kv.sizes,
    )


def _fitting_dcp(plan: LaneBudget, params: BudgetParams, stage: int, room: int) -> int | None:
    """The smallest dcp above the lane's that divides tp and whose KV fits `room`."""
    lane = plan.lane
    for dcp in range(lane.dcp + 1, lane.tp + 1):
        if lane.tp % dcp:
            continue
        variant = _variant(plan, params, dcp=dcp)
        # An engine that refuses the shape (vLLM: DCP with sliding-window layers, kv.py) is no lever.
        if not variant.refusals and variant.stage(stage, lane.max_model_len).total <= room:
            return dcp
    return None


def advice(plan: LaneBudget, rank: RankBudget, params: BudgetParams) -> tuple[str, dict[str, DetailValue]]:
    """(sentence, figures) of the changes that would make `rank` fit, cheapest first."""
    lane = plan.lane
    arch = plan.model.architecture
    stage = plan.stage_of(rank.rank)
    room = _kv_room(rank)
    options: list[str] = []
    detail: dict[str, DetailValue] = {}
    fits = plan.kv.longest_fitting(stage, room, lane.max_model_len) if room > 0 else 0
    if plan.kv_tokens_cap is not None:
        fits = min(fits, plan.kv_tokens_cap // plan.kv.seqs)
    detail["fitting_max_model_len"] = fits
    cap = plan.kv_tokens_cap
    if cap is not None and rank.need <= rank.budget:
        # The memory is there; the token cap is what cuts requests.
        wanted = lane.max_model_len * plan.kv.seqs
        return f"lower max_model_len to {fits} or less or raise --max-total-tokens to {wanted}", detail
    if fits >= 1:
        options.append(f"lower max_model_len to {fits} or less")
    else:
        fixed = rank.weights + rank.drafter + (rank.overhead if rank.overhead_inside else 0)
        options.append(
            f"weights and the rest alone need {fixed / GIB:.1f} GiB: spread the weights over more ranks (tp or pp)"
        )
        options += _flag_lever(plan, rank, detail)
        return options[0] if len(options) == 1 else f"{options[0]} or {options[1]}", detail
    if arch.attention == "mla":
        if not _has_sliding_layers(plan):
            dcp = _fitting_dcp(plan, params, stage, room)
            if dcp is not None:
                detail["fitting_dcp"] = dcp
                options.append(
                    f"raise dcp to {dcp} (the MLA latent cache is whole on every TP rank, so tp does not shrink "
                    f"it; dcp {dcp} splits its tokens over the TP group)"
                )
        options.append("raise pp (fewer layers per rank; raising tp alone leaves the latent cache as it is)")
    else:
        kv_heads = arch.kv_heads or 1
        if kv_heads > lane.tp:
            options.append(f"raise tp (the {kv_heads} KV heads split over tp)")
        else:
            options.append(f"raise pp (tp {lane.tp} already replicates the {kv_heads} KV heads on every rank)")
    width = params.kv.dtype_bytes.get(lane.kv_cache_dtype, 0)
    fp8_kv = _variant(plan, params, dtype="fp8").stage(stage, lane.max_model_len).total if width > 1 else room + 1
    if fp8_kv <= room:
        options.append("set kv_cache_dtype: fp8 (half the bytes of a 16-bit cache)")
    options += _flag_lever(plan, rank, detail)
    text = ", ".join(options[:-1]) + f" or {options[-1]}" if len(options) > 1 else options[0]
    return text, detail


def _flag_lever(plan: LaneBudget, rank: RankBudget, detail: dict[str, DetailValue]) -> list[str]:
    """Raising the engine's own memory flag, when the engine would still start with it."""
    sem = plan.semantics
    if plan.kv_bytes is not None or not rank.base_bytes:
        return []
    needed = math.ceil(rank.need / rank.base_bytes * 100) / 100
    if needed <= rank.utilization:
        return []
    detail["needed_utilization"] = needed
    if sem.fraction_of == "torch_visible":
        # vLLM refuses to start when the request is over what is free at boot (request_memory).
        if needed * rank.base_bytes <= rank.boot_free:
            return [f"raise gpu_memory_utilization ({sem.flag}) to {needed:.2f}"]
        return []
    # SGLang: the fraction is of the free memory; the rest must still hold the overhead.
    if needed <= 1 and (1 - needed) * rank.base_bytes >= rank.overhead:
        return [f"raise gpu_memory_utilization ({sem.flag}) to {needed:.2f}"]
    return []
