"""Rules about lanes that meet on a host: `host-sharing`, `port-clash`, `name-clash`.

Everything here walks the running-lanes-per-host index once, so the cost is
the number of (lane, host) pairs, never lanes x lanes. A clash is reported
to every lane involved, naming the others, and grouped over hosts so four
shared Sparks make one finding per lane, not four.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from reconciler.engines.ports import listening
from reconciler.errors import InputError
from reconciler.policy.config import RuleSettings
from reconciler.policy.context import Context
from reconciler.policy.engine_memory import SEMANTICS, utilization
from reconciler.policy.hardware import HARDWARE_PATH, Capacity
from reconciler.policy.verdict import GIB, DetailValue, gib
from reconciler.spec.lane import Lane


@dataclass
class _Clash:
    lane: Lane
    others: tuple[str, ...]
    hosts: list[str] = field(default_factory=list)
    detail: dict[str, DetailValue] = field(default_factory=dict)


def _collect(groups: Iterable[tuple[str, list[Lane], dict[str, DetailValue]]]) -> list[_Clash]:
    """(host, lanes that clash there, numbers) -> one clash per (lane, other lanes)."""
    out: dict[tuple[str, tuple[str, ...]], _Clash] = {}
    for host, lanes, detail in groups:
        names = sorted(lane.name for lane in lanes)
        for lane in lanes:
            others = tuple(n for n in names if n != lane.name)
            clash = out.setdefault((lane.name, others), _Clash(lane=lane, others=others, detail=dict(detail)))
            clash.hosts.append(host)
    return list(out.values())


def _emit(ctx: Context, rule: RuleSettings, clashes: list[_Clash], sentence: Callable[[_Clash], str]) -> None:
    for clash in clashes:
        detail = dict(clash.detail)
        detail["hosts"] = ",".join(clash.hosts)
        detail["other_lanes"] = ",".join(clash.others)
        ctx.report(
            rule,
            severity="deny",
            lane=clash.lane,
            host=clash.hosts[0],
            message=sentence(clash),
            detail=detail,
        )


def _limit(capacity: Capacity, basis: str, free: int) -> int:
    if basis == "boot_free":
        return free
    if basis == "torch_visible":
        return capacity.torch_visible
    return capacity.boot_cap


@dataclass(frozen=True)
class _Take:
    """What one lane holds on a host, in its engine's terms."""

    lane: Lane
    bytes: int
    words: str
    fraction_of_free: float | None = None
    """SGLang: the fraction it takes of whatever is free when it starts."""
    outside: int = 0
    """SGLang: the overhead it keeps outside that fraction."""
    need: int = 0
    """SGLang: weights + KV + drafter it must get from the fraction."""


def _take(ctx: Context, lane: Lane, host: str, capacity: Capacity) -> _Take:
    sem = SEMANTICS[lane.engine]
    util = utilization(lane.args, sem, lane.gpu_memory_utilization)
    plan = ctx.plans.get(lane.name)
    rank = next((r for r in plan.ranks if r.host == host), None) if plan is not None else None
    if sem.fraction_of == "boot_free":
        # SGLang sizes its static pool from what is free when it starts; its least is what it needs.
        need = rank.need if rank is not None else 0
        outside = rank.overhead if rank is not None else 0
        return _Take(lane, need + outside, f"{lane.name} {(need + outside) / GIB:.1f} (needs)", util, outside, need)
    if rank is not None and rank.base == "boot_free":  # vLLM --kv-cache-memory-bytes: weights + that KV + overhead
        return _Take(lane, rank.need, f"{lane.name} {rank.need / GIB:.1f} ({rank.flag})")
    asked = math.ceil(util * capacity.torch_visible)
    return _Take(lane, asked, f"{lane.name} {asked / GIB:.1f} ({sem.flag} {util:.2f})")


def check_host_sharing(ctx: Context, rule: RuleSettings) -> None:
    """Two running lanes on a host, summed in each engine's terms.

    A vLLM lane takes its whole budget (ceil(gpu_memory_utilization x total): the KV cache fills it), or
    weights + KV + overhead with --kv-cache-memory-bytes. An SGLang lane takes --mem-fraction-static of
    whatever is free when it starts, so it counts at what it needs, and the lanes must fit in either start
    order: started first it takes that fraction of all the free memory and leaves the rest to the others.
    """
    basis = rule.text("capacity")
    groups: list[tuple[str, list[Lane], dict[str, DetailValue]]] = []
    for host, lanes in ctx.running_by_host.items():
        if len(lanes) < 2:
            continue
        capacity, boot = ctx.capacity(host), ctx.boot_free(host)
        if capacity is None or boot is None:
            continue
        limit = _limit(capacity, basis, boot.bytes)
        takes = [_take(ctx, lane, host, capacity) for lane in sorted(lanes, key=lambda ln: ln.name)]
        total = sum(t.bytes for t in takes)
        why = ""
        if total > limit:
            why = (
                f"{' + '.join(t.words for t in takes)} = {total / GIB:.1f} GiB, over the {limit / GIB:.1f} GiB a "
                f"host can give ({basis}: {boot.source if basis == 'boot_free' else capacity.profile})"
            )
        else:
            for first in takes:
                if first.fraction_of_free is None:
                    continue
                grabbed = int(first.fraction_of_free * limit) + first.outside
                others = total - first.bytes
                if grabbed + others > limit:
                    why = (
                        f"started first, SGLang lane {first.lane.name} takes --mem-fraction-static "
                        f"{first.fraction_of_free:.2f} of the {limit / GIB:.1f} GiB free plus "
                        f"{first.outside / GIB:.1f} GiB outside it ({grabbed / GIB:.1f} GiB), leaving "
                        f"{(limit - grabbed) / GIB:.1f} GiB for the {others / GIB:.1f} GiB the others need"
                    )
                    break
        if not why:
            continue
        detail: dict[str, DetailValue] = {
            "sum_takes": total,
            "sum_takes_gib": gib(total),
            "limit": limit,
            "limit_gib": gib(limit),
            "limit_basis": basis,
            "limit_source": boot.source if basis == "boot_free" else f"{HARDWARE_PATH} {capacity.profile}",
            "why": why,
            "torch_visible_gib": gib(capacity.torch_visible),
        }
        for t in takes:
            detail[f"take_gib[{t.lane.name}]"] = gib(t.bytes)
        groups.append((host, lanes, detail))

    def sentence(clash: _Clash) -> str:
        hosts, others = ", ".join(clash.hosts), ", ".join(clash.others)
        return (
            f"lane {clash.lane.name} shares {hosts} with running lane {others}: {clash.detail['why']}; stop one "
            "lane, move it to other hosts, or lower gpu_memory_utilization"
        )

    _emit(ctx, rule, _collect(groups), sentence)


def check_port_clash(ctx: Context, rule: RuleSettings) -> None:
    """Every port a rank listens on (API, torch.distributed, Ray: `engines.ports`), per host, across lanes."""
    groups: list[tuple[str, list[Lane], dict[str, DetailValue]]] = []
    for host, lanes in ctx.running_by_host.items():
        if len(lanes) < 2:
            continue
        ranges: list[tuple[int, int, str, Lane]] = []
        for lane in lanes:
            try:
                for rank, name in enumerate(lane.hosts):
                    if name == host:
                        ranges += [(lo, hi, what, lane) for what, (lo, hi) in listening(lane, rank).items()]
            except InputError:
                continue  # a port block past 65535: the render rule denies the lane and says why
        ranges.sort(key=lambda r: (r[0], r[1]))
        seen: set[tuple[str, ...]] = set()
        for i, (lo, hi, what, lane) in enumerate(ranges):
            for lo2, hi2, what2, other in ranges[i + 1 :]:
                if lo2 > hi:
                    break
                if other.name == lane.name or lo2 > hi or lo > hi2:
                    continue
                key = tuple(sorted((lane.name, other.name)))
                if key in seen:
                    continue
                seen.add(key)
                uses = f"{lane.name} {what}, {other.name} {what2}"
                groups.append((host, [lane, other], {"port": max(lo, lo2), "uses": uses}))

    def sentence(clash: _Clash) -> str:
        hosts, others = ", ".join(clash.hosts), ", ".join(clash.others)
        return (
            f"lane {clash.lane.name} listens on port {clash.detail['port']} on {hosts}, as running lane "
            f"{others} does ({clash.detail['uses']}); give one lane another port (a multi-node lane also "
            "listens at fixed offsets above its port: see `lanes check` details)"
        )

    _emit(ctx, rule, _collect(groups), sentence)


def container_key(name: str) -> str:
    """What a lane name becomes where '.' and '_' are not allowed (DNS labels, some renderers)."""
    return name.replace(".", "-").replace("_", "-")


def check_name_clash(ctx: Context, rule: RuleSettings) -> None:
    by_key: dict[str, list[Lane]] = {}
    for lane in ctx.desired.lanes.values():
        by_key.setdefault(container_key(lane.name), []).append(lane)
    for key, lanes in by_key.items():
        if len(lanes) < 2:
            continue
        names = sorted(lane.name for lane in lanes)
        for lane in lanes:
            others = ", ".join(n for n in names if n != lane.name)
            ctx.report(
                rule,
                severity="deny",
                lane=lane,
                message=(
                    f"lane name '{lane.name}' becomes container name '{key}', as lane {others} does; "
                    "rename one "
                    "lane so they differ in more than '.', '_' and '-'"
                ),
                detail={"container_name": key, "other_lanes": others},
            )
    groups: list[tuple[str, list[Lane], dict[str, DetailValue]]] = []
    for host, lanes in ctx.running_by_host.items():
        if len(lanes) < 2:
            continue
        by_served: dict[str, list[Lane]] = {}
        for lane in lanes:
            by_served.setdefault(lane.served_name, []).append(lane)
        for served, same in by_served.items():
            if len(same) > 1:
                groups.append((host, same, {"served_model_name": served}))

    def sentence(clash: _Clash) -> str:
        hosts, others = ", ".join(clash.hosts), ", ".join(clash.others)
        served = clash.detail["served_model_name"]
        return (
            f"lane {clash.lane.name} serves model name '{served}' on {hosts}, as running lane {others} does, "
            "so clients cannot tell them apart; set a distinct served_model_name"
        )

    _emit(ctx, rule, _collect(groups), sentence)
