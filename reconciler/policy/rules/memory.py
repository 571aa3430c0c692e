"""The memory rules: `memory-budget` per rank, `boot-utilization` per lane.

The arithmetic lives in budget.py and kv.py; this module turns the numbers
into findings a person can act on: what was needed, what was allowed, and
the smallest change that would make the rank fit.
"""

from __future__ import annotations

from collections.abc import Mapping

from reconciler.policy.budget import BudgetParams, LaneBudget, fix_hint
from reconciler.policy.config import RuleSettings
from reconciler.policy.context import Context
from reconciler.policy.verdict import GIB, DetailValue, RankBudget, gib


def _detail(plan: LaneBudget, rank: RankBudget) -> dict[str, DetailValue]:
    lane = plan.lane
    out: dict[str, DetailValue] = {
        "weights": rank.weights,
        "kv_min": rank.kv_min,
        "overhead": rank.overhead,
        "need": rank.need,
        "budget": rank.budget,
        "headroom": rank.headroom,
        "weights_gib": gib(rank.weights),
        "kv_min_gib": gib(rank.kv_min),
        "overhead_gib": gib(rank.overhead),
        "need_gib": gib(rank.need),
        "budget_gib": gib(rank.budget),
        "headroom_gib": gib(rank.headroom),
        "utilization": rank.utilization,
        "torch_visible_gib": gib(rank.capacity),
        "max_model_len": lane.max_model_len,
        "kv_cache_dtype": lane.kv_cache_dtype,
        "tp": lane.tp,
        "pp": lane.pp,
        "dcp": lane.dcp,
        "floor": rank.floor,
    }
    for part, value in rank.kv_parts.items():
        out[f"kv_{part}"] = value
    return out


def _sum(rank: RankBudget) -> str:
    return f"weights {rank.weights / GIB:.1f} + KV {rank.kv_min / GIB:.1f} + overhead {rank.overhead / GIB:.1f}"


def check_memory_budget(ctx: Context, rule: RuleSettings, plans: Mapping[str, LaneBudget]) -> None:
    params = BudgetParams.from_rule(rule)
    for plan in plans.values():
        lane = plan.lane
        if plan.floor_reasons:
            ctx.report(
                rule,
                severity="warn",
                lane=lane,
                host=lane.head,
                message=(
                    f"the memory estimate is a floor: {', '.join(plan.floor_reasons)} adds draft caches it "
                    "does "
                    "not size; keep more headroom than the figures show"
                ),
                detail={"floor": True, "floor_args": ",".join(plan.floor_reasons)},
            )
        for rank in plan.ranks:
            capacity = ctx.capacity(rank.host)
            assert capacity is not None
            budget_words = f"{rank.budget / GIB:.1f} GiB ({rank.utilization:.2f} x {rank.capacity / GIB:.1f} GiB)"
            detail = _detail(plan, rank)
            if rank.need > rank.budget:
                hint, fits, needed_util = fix_hint(plan, rank, capacity.max_boot_utilization)
                detail["fitting_max_model_len"] = fits
                detail["needed_utilization"] = needed_util
                ctx.report(
                    rule,
                    severity="deny",
                    lane=lane,
                    host=rank.host,
                    rank=rank.rank,
                    message=(
                        f"rank {rank.rank} on {rank.host} needs {rank.need / GIB:.1f} GiB ({_sum(rank)}) "
                        "but the "
                        f"budget is {budget_words}; {hint}"
                    ),
                    detail=detail,
                )
            elif rank.headroom < params.headroom_warn:
                ctx.report(
                    rule,
                    severity="warn",
                    lane=lane,
                    host=rank.host,
                    rank=rank.rank,
                    message=(
                        f"rank {rank.rank} on {rank.host} leaves {rank.headroom / GIB:.1f} GiB of "
                        "headroom, under "
                        f"the {params.headroom_warn / GIB:g} GiB margin: it needs {rank.need / GIB:.1f} GiB "
                        f"({_sum(rank)}) of a {budget_words} budget; lower max_model_len or raise tp so long "
                        "prefills and concurrent sequences have room"
                    ),
                    detail=detail,
                )


def check_boot_utilization(ctx: Context, rule: RuleSettings) -> None:
    for lane in ctx.desired.lanes.values():
        worst = None
        for host in lane.hosts:
            capacity = ctx.capacity(host)
            if capacity is not None and (
                worst is None or capacity.max_boot_utilization < worst[1].max_boot_utilization
            ):
                worst = (host, capacity)
        if worst is None:
            continue
        host, capacity = worst
        if lane.gpu_memory_utilization <= capacity.max_boot_utilization:
            continue
        asked = capacity.budget(lane.gpu_memory_utilization)
        ctx.report(
            rule,
            severity="deny",
            lane=lane,
            host=host,
            message=(
                f"gpu_memory_utilization {lane.gpu_memory_utilization:.2f} asks for {asked / GIB:.1f} GiB "
                "per rank "
                f"but only about {capacity.boot_free / GIB:.1f} GiB of {capacity.torch_visible / GIB:.1f} "
                "GiB is "
                f"free at boot on {capacity.profile} (cap {capacity.max_boot_utilization:.2f} = "
                f"{capacity.boot_cap / GIB:.1f} GiB), so the engine can fail at start; lower it to "
                f"{capacity.max_boot_utilization:.2f} or drop the page cache before start"
            ),
            detail={
                "utilization": lane.gpu_memory_utilization,
                "max_boot_utilization": capacity.max_boot_utilization,
                "asked": asked,
                "asked_gib": gib(asked),
                "boot_free": capacity.boot_free,
                "boot_free_gib": gib(capacity.boot_free),
                "boot_cap": capacity.boot_cap,
                "boot_cap_gib": gib(capacity.boot_cap),
                "torch_visible_gib": gib(capacity.torch_visible),
                "profile": capacity.profile,
            },
        )
