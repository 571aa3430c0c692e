"""Rules about lanes that meet on a host: `host-sharing`, `port-clash`, `name-clash`.

Everything here walks the running-lanes-per-host index once, so the cost is
the number of (lane, host) pairs, never lanes x lanes. A clash is reported
to every lane involved, naming the others, and grouped over hosts so four
shared Sparks make one finding per lane, not four.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from reconciler.engines.ports import listening
from reconciler.errors import InputError
from reconciler.policy.config import RuleSettings
from reconciler.policy.context import Context
from reconciler.policy.hardware import Capacity
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


def _limit(capacity: Capacity, basis: str) -> int:
    if basis == "boot_free":
        return capacity.boot_free
    if basis == "torch_visible":
        return capacity.torch_visible
    return capacity.boot_cap


def check_host_sharing(ctx: Context, rule: RuleSettings) -> None:
    basis = rule.text("capacity")
    groups: list[tuple[str, list[Lane], dict[str, DetailValue]]] = []
    for host, lanes in ctx.running_by_host.items():
        if len(lanes) < 2:
            continue
        capacity = ctx.capacity(host)
        if capacity is None:
            continue
        budgets = {lane.name: capacity.budget(lane.gpu_memory_utilization) for lane in lanes}
        total = sum(budgets.values())
        limit = _limit(capacity, basis)
        if total <= limit:
            continue
        detail: dict[str, DetailValue] = {
            "sum_budgets": total,
            "sum_budgets_gib": gib(total),
            "limit": limit,
            "limit_gib": gib(limit),
            "limit_basis": basis,
            "sum_utilization": round(sum(lane.gpu_memory_utilization for lane in lanes), 4),
            "torch_visible_gib": gib(capacity.torch_visible),
        }
        for name, budget in budgets.items():
            detail[f"budget_gib[{name}]"] = gib(budget)
        groups.append((host, lanes, detail))

    def sentence(clash: _Clash) -> str:
        d = clash.detail
        parts = " + ".join(
            f"{name} {d[f'budget_gib[{name}]']:.1f}" for name in sorted([clash.lane.name, *clash.others])
        )
        hosts, others = ", ".join(clash.hosts), ", ".join(clash.others)
        total, limit = float(d["sum_budgets"]) / GIB, float(d["limit"]) / GIB
        return (
            f"lane {clash.lane.name} shares {hosts} with running lane {others}: the budgets add up to "
            f"{parts} = {total:.1f} GiB, over the {limit:.1f} GiB a host can give ({basis}); stop one lane, "
            "move it to other hosts, or lower gpu_memory_utilization"
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
