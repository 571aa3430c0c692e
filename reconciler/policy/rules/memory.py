"""The memory rules: `memory-budget` and `boot-utilization`, once per lane, in the engine's own terms.

The arithmetic lives in budget.py and kv.py; this module turns the numbers
into findings a person can act on: what was needed, what the engine's flag
gives and what it is a fraction of (and where that figure came from), what
the engine would do about it, and the changes that would make the lane fit
(advice.py). A lane whose ranks share a problem gets one finding naming the
ranks, with the worst rank's figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from reconciler.policy.advice import advice
from reconciler.policy.budget import BudgetParams, LaneBudget
from reconciler.policy.config import RuleSettings
from reconciler.policy.context import Context
from reconciler.policy.engine_memory import SEMANTICS, utilization
from reconciler.policy.hardware import Capacity
from reconciler.policy.hostmem import BootFree
from reconciler.policy.rules.memcap import check_memory_cap
from reconciler.policy.verdict import GIB, DetailValue, RankBudget, gib
from reconciler.spec.lane import Lane

ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "flare": "FLARE", "generic": "the engine"}

_Boot = tuple[int, str, BootFree, Capacity]
"""(free bytes, host, where the figure came from, the host's profile)."""


def _detail(plan: LaneBudget, rank: RankBudget, ranks: list[RankBudget]) -> dict[str, DetailValue]:
    lane = plan.lane
    out: dict[str, DetailValue] = {
        "ranks": ",".join(str(r.rank) for r in ranks),
        "hosts": ",".join(r.host for r in ranks),
        "worst_rank": rank.rank,
        "engine": rank.engine,
        "flag": rank.flag,
        "weights": rank.weights,
        "kv_min": rank.kv_min,
        "kv_source": rank.kv_source,
        "drafter": rank.drafter,
        "overhead": rank.overhead,
        "overhead_inside_budget": rank.overhead_inside,
        "need": rank.need,
        "budget": rank.budget,
        "headroom": rank.headroom,
        "pool": rank.pool,
        "context": rank.context,
        "remainder": rank.remainder,
        "weights_gib": gib(rank.weights),
        "kv_min_gib": gib(rank.kv_min),
        "drafter_gib": gib(rank.drafter),
        "overhead_gib": gib(rank.overhead),
        "need_gib": gib(rank.need),
        "budget_gib": gib(rank.budget),
        "headroom_gib": gib(rank.headroom),
        "pool_gib": gib(rank.pool),
        "utilization": rank.utilization,
        "base": rank.base,
        "base_gib": gib(rank.base_bytes),
        "base_origin": rank.base_origin,
        "base_source": rank.base_source,
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


def _where(ranks: list[RankBudget]) -> str:
    word = "rank" if len(ranks) == 1 else "ranks"
    return f"{word} {', '.join(str(r.rank) for r in ranks)} on {', '.join(r.host for r in ranks)}"


def _sum(rank: RankBudget) -> str:
    parts = [f"weights {rank.weights / GIB:.1f}", f"KV {rank.kv_min / GIB:.1f}"]
    if rank.drafter:
        parts.append(f"drafter {rank.drafter / GIB:.1f}")
    if rank.overhead_inside:
        parts.append(f"overhead {rank.overhead / GIB:.1f}")
    return " + ".join(parts)


def budget_words(rank: RankBudget) -> str:
    """What the budget is, in the engine's terms, with where its base came from."""
    if rank.base == "torch_visible":
        return (
            f"{rank.budget / GIB:.1f} GiB ({rank.flag} {rank.utilization:.2f} x {rank.base_bytes / GIB:.1f} GiB "
            "total memory)"
        )
    if rank.flag.startswith("--kv-cache-memory-bytes"):
        return (
            f"{rank.budget / GIB:.1f} GiB free at boot ({rank.base_source}; {rank.flag} makes vLLM allocate past "
            "its --gpu-memory-utilization)"
        )
    return (
        f"{rank.budget / GIB:.1f} GiB ({rank.flag} {rank.utilization:.2f} x {rank.base_bytes / GIB:.1f} GiB free "
        f"at boot, {rank.base_source})"
    )


def _deny_sentence(plan: LaneBudget, rank: RankBudget, where: str) -> str:
    lane = plan.lane
    sem = plan.semantics
    if sem.caps_context:
        fixed = rank.weights + rank.drafter
        if fixed > rank.budget:
            return (
                f"{where}: weights{' and drafter' if rank.drafter else ''} of {fixed / GIB:.1f} GiB exceed the "
                f"static budget of {budget_words(rank)}, so SGLang refuses to start"
            )
        return (
            f"{where}: SGLang would start and silently cap every request at {rank.context} tokens: the KV pool "
            f"left after weights is {rank.pool / GIB:.1f} GiB of a {budget_words(rank)} static budget, under "
            f"the {rank.kv_min / GIB:.1f} GiB that max_model_len {lane.max_model_len} x "
            f"{plan.kv.seqs} sequence(s) needs"
        )
    if plan.kv_bytes is not None and rank.need <= rank.budget:
        return (
            f"{where}: {sem.kv_bytes_flag} {plan.kv_bytes} holds {rank.context} tokens, under max_model_len "
            f"{lane.max_model_len} x {plan.kv.seqs} sequence(s), so vLLM refuses to start"
        )
    needs = "needs" if where.startswith("rank ") else "each need up to"
    outcome = (
        f"cannot hold one max_model_len request ({rank.context} tokens would fit)"
        if rank.pool > 0
        else "has no memory left for the KV cache"
    )
    return (
        f"{where} {needs} {rank.need / GIB:.1f} GiB ({_sum(rank)}) but the budget is {budget_words(rank)}, so "
        f"{ENGINE_NAMES.get(lane.engine, lane.engine)} {outcome} and refuses to start"
    )


def _tokens_cap_sentence(plan: LaneBudget, where: str) -> str | None:
    cap = plan.kv_tokens_cap
    if cap is None or cap // plan.kv.seqs >= plan.lane.max_model_len:
        return None
    return (
        f"{where}: --max-total-tokens {cap} caps SGLang's pool below max_model_len {plan.lane.max_model_len} x "
        f"{plan.kv.seqs} sequence(s), so every request is cut at {cap // plan.kv.seqs} tokens"
    )


def check_memory_budget(ctx: Context, rule: RuleSettings, plans: Mapping[str, LaneBudget]) -> None:
    params = BudgetParams.from_rule(rule)
    denied: set[str] = set()
    for plan in plans.values():
        lane = plan.lane
        if plan.floor_reasons:
            ctx.report(
                rule,
                severity="warn",
                lane=lane,
                host=lane.head,
                message=(
                    f"the memory estimate is a floor: {', '.join(plan.floor_reasons)} adds a drafter whose method "
                    "has no figure in rules.yaml (drafter_gib); keep more headroom than the figures show"
                ),
                detail={"floor": True, "floor_args": ",".join(plan.floor_reasons)},
            )
        if not plan.ranks:
            continue
        over = [r for r in plan.ranks if r.need > r.budget or r.context < lane.max_model_len]
        capped = _tokens_cap_sentence(plan, _where(list(plan.ranks)))
        if over or capped:
            ranks = over or list(plan.ranks)
            worst = min(ranks, key=lambda r: r.headroom)
            detail = _detail(plan, worst, ranks)
            hint, figures = advice(plan, worst, params)
            detail.update(figures)
            memory_short = [r for r in ranks if r.need > r.budget or plan.kv_tokens_cap is None]
            text = _deny_sentence(plan, worst, _where(ranks)) if memory_short or not capped else capped
            ctx.report(rule, severity="deny", lane=lane, message=f"{text}; {hint}", detail=detail)
            denied.add(lane.name)
            continue
        low = [r for r in plan.ranks if r.headroom < params.headroom_warn]
        if low:
            worst = min(low, key=lambda r: r.headroom)
            lever = "raise dcp or pp" if plan.model.architecture.attention == "mla" else "raise tp or pp"
            ctx.report(
                rule,
                severity="warn",
                lane=lane,
                message=(
                    f"{_where(low)} leave as little as {worst.headroom / GIB:.1f} GiB of headroom, under the "
                    f"{params.headroom_warn / GIB:g} GiB margin: rank {worst.rank} needs {worst.need / GIB:.1f} GiB "
                    f"({_sum(worst)}) of a {budget_words(worst)} budget; lower max_model_len or {lever} so long "
                    "prefills and concurrent sequences have room"
                ),
                detail=_detail(plan, worst, low),
            )
    # The container's memory cap against the host's memory and each rank's figures above (memcap.py).
    check_memory_cap(ctx, rule, plans, denied)


def check_boot_utilization(ctx: Context, rule: RuleSettings) -> None:
    """Will the engine start at all with this fraction, given the free memory at boot?

    vLLM and FLARE: the request (fraction x total) must not exceed what is free (vLLM's request_memory).
    SGLang: the fraction is of what is free, so it always "fits"; what can fail is the remainder outside it,
    which must hold activations and CUDA graphs, and ranks whose free memory differs by more than 10 %
    (sglang/srt/distributed/bootstrap.py _check_tp_memory_balance). A generic lane is given no fraction.
    """
    for lane in ctx.desired.lanes.values():
        sem = SEMANTICS[lane.engine]
        if lane.engine == "generic":
            continue
        util = utilization(lane.args, sem, lane.gpu_memory_utilization)
        boots: list[_Boot] = []
        for host in lane.hosts:
            boot, capacity = ctx.boot_free(host), ctx.capacity(host)
            if boot is not None and capacity is not None:
                boots.append((boot.bytes, host, boot, capacity))
        if not boots:
            continue
        _, host, boot, capacity = min(boots, key=lambda b: (b[0], b[1]))
        if sem.fraction_of == "torch_visible":
            _check_request(ctx, rule, lane, util, host, boot.bytes, boot.source, capacity.torch_visible, sem.flag)
        else:
            _check_remainder(ctx, rule, lane, util, host, boot.bytes, boot.source, sem.flag)
            _check_balance(ctx, rule, lane, boots)


def _check_request(
    ctx: Context, rule: RuleSettings, lane: Lane, util: float, host: str, free: int, source: str, total: int, flag: str
) -> None:
    asked = math.ceil(util * total)
    if asked <= free:
        return
    fitting = math.floor(free / total * 100) / 100
    ctx.report(
        rule,
        severity="deny",
        lane=lane,
        host=host,
        message=(
            f"{flag} {util:.2f} asks for {asked / GIB:.1f} GiB per rank ({util:.2f} x {total / GIB:.1f} GiB total) "
            f"but {free / GIB:.1f} GiB is free at boot on {host} ({source}); {_who(lane.engine)} compares the "
            "request with free memory (on GB10 the OS's MemAvailable) and refuses to start: lower "
            f"gpu_memory_utilization to {fitting:.2f} or free memory before start"
        ),
        detail={
            "flag": flag,
            "utilization": util,
            "asked": asked,
            "asked_gib": gib(asked),
            "boot_free": free,
            "boot_free_gib": gib(free),
            "boot_free_source": source,
            "fitting_utilization": fitting,
            "torch_visible_gib": gib(total),
        },
    )


def _who(engine: str) -> str:
    return "vLLM" if engine == "vllm" else f"{engine} (read as vLLM: it publishes no memory semantics)"


def _check_remainder(
    ctx: Context, rule: RuleSettings, lane: Lane, util: float, host: str, free: int, source: str, flag: str
) -> None:
    plan = ctx.plans.get(lane.name)
    if plan is None or not plan.ranks:
        return
    overhead = plan.ranks[0].overhead
    remainder = free - int(util * free)
    if remainder >= overhead:
        return
    fitting = math.floor((1 - overhead / free) * 100) / 100
    ctx.report(
        rule,
        severity="deny",
        lane=lane,
        host=host,
        message=(
            f"{flag} {util:.2f} leaves {remainder / GIB:.1f} GiB of the {free / GIB:.1f} GiB free at boot on {host} "
            f"({source}) outside SGLang's static pool, under the {overhead / GIB:.1f} GiB its activations and CUDA "
            f"graphs take there (rules.yaml overhead_gib); lower gpu_memory_utilization to {fitting:.2f}"
        ),
        detail={
            "flag": flag,
            "utilization": util,
            "remainder": remainder,
            "remainder_gib": gib(remainder),
            "overhead_gib": gib(overhead),
            "boot_free_gib": gib(free),
            "boot_free_source": source,
            "fitting_utilization": fitting,
        },
    )


def _check_balance(ctx: Context, rule: RuleSettings, lane: Lane, boots: list[_Boot]) -> None:
    observed = [(free, host) for free, host, boot, _ in boots if boot.origin == "observed"]
    if len(observed) < 2:
        return
    low, low_host = min(observed)
    high, high_host = max(observed)
    if low >= 0.9 * high:
        return
    ctx.report(
        rule,
        severity="warn",
        lane=lane,
        host=low_host,
        message=(
            f"free memory at boot differs over the lane's hosts: {low / GIB:.1f} GiB on {low_host} against "
            f"{high / GIB:.1f} GiB on {high_host}; SGLang sizes every rank from the smallest and, under 90 % of a "
            "rank's own, warns of unbalanced memory (or refuses with SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK)"
        ),
        detail={"min_free_gib": gib(low), "max_free_gib": gib(high), "min_host": low_host, "max_host": high_host},
    )
