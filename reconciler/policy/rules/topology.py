"""`topology`: the lane's shape must be one the engines can launch.

One rank per host, tp x pp ranks; hosts that exist with a hardware profile
the budget can be computed against; ep and dcp that divide what they split;
attention heads that split evenly over tp (vLLM and SGLang refuse the rest);
no dcp on a model with sliding-window layers under vLLM, which refuses it
(kv.py dcp_sliding_refusal).
A lane that fails here may still get budgets for the ranks that resolve.
"""

from __future__ import annotations

from reconciler.policy.config import RuleSettings
from reconciler.policy.context import Context
from reconciler.policy.kv import dcp_sliding_refusal
from reconciler.spec.lane import Lane


def check_topology(ctx: Context, rule: RuleSettings) -> None:
    for lane in ctx.desired.lanes.values():
        _shape(ctx, rule, lane)
        _hosts(ctx, rule, lane)
        _heads(ctx, rule, lane)


def _shape(ctx: Context, rule: RuleSettings, lane: Lane) -> None:
    world = lane.tp * lane.pp
    shape = {
        "tp": lane.tp,
        "pp": lane.pp,
        "ep": lane.ep,
        "dcp": lane.dcp,
        "hosts": len(lane.hosts),
        "ranks": world,
    }
    if world != len(lane.hosts):
        ctx.report(
            rule,
            severity="deny",
            lane=lane,
            message=(
                f"tp x pp is {lane.tp} x {lane.pp} = {world} ranks but the lane lists {len(lane.hosts)} "
                "hosts "
                "(one rank per host); list one host per rank or change tp/pp"
            ),
            detail=shape,
        )
    if lane.ep > world or world % lane.ep:
        ctx.report(
            rule,
            severity="deny",
            lane=lane,
            message=f"ep {lane.ep} must divide tp x pp = {world}; use one of {_divisors(world)}",
            detail=shape,
        )
    if lane.tp % lane.dcp:
        ctx.report(
            rule,
            severity="deny",
            lane=lane,
            message=(
                f"dcp {lane.dcp} must divide tp {lane.tp} (DCP splits a TP group); use one of {_divisors(lane.tp)}"
            ),
            detail=shape,
        )


def _hosts(ctx: Context, rule: RuleSettings, lane: Lane) -> None:
    for rank, name in enumerate(lane.hosts):
        host = ctx.host(name)
        if host is None:
            known = ", ".join(sorted(ctx.desired.hosts)[:8]) or "none"
            ctx.report(
                rule,
                severity="deny",
                lane=lane,
                host=name,
                rank=rank,
                message=(
                    f"host '{name}' (rank {rank}) is not defined in state/hosts/ (known: {known}); "
                    "add it or fix the name"
                ),
                detail={"rank": rank},
            )
        elif host.hardware not in ctx.capacities:
            profiles = ", ".join(sorted(ctx.capacities)) or "none"
            ctx.report(
                rule,
                severity="deny",
                lane=lane,
                host=name,
                rank=rank,
                message=(
                    f"host '{name}' uses hardware profile '{host.hardware}', which policies/hardware.yaml "
                    "does not "
                    f"define (profiles: {profiles}); its memory budget cannot be computed"
                ),
                detail={"rank": rank, "hardware": host.hardware},
            )


def _heads(ctx: Context, rule: RuleSettings, lane: Lane) -> None:
    model = ctx.desired.models.get(lane.model)
    if model is None:
        return
    arch = model.architecture
    if arch.num_heads is not None and arch.num_heads % lane.tp:
        ctx.report(
            rule,
            severity="deny",
            lane=lane,
            message=(
                f"model {model.name} has {arch.num_heads} attention heads, which do not split evenly over tp "
                f"{lane.tp}; use a tp that divides {arch.num_heads}"
            ),
            detail={"num_heads": arch.num_heads, "tp": lane.tp},
        )
    if arch.attention != "mla" and arch.kv_heads is not None:
        kv = arch.kv_heads
        if kv % lane.tp and lane.tp % kv:
            ctx.report(
                rule,
                severity="deny",
                lane=lane,
                message=(
                    f"model {model.name} has {kv} KV heads and tp is {lane.tp}: one must divide the other "
                    "for the "
                    "engines to shard or replicate them"
                ),
                detail={"kv_heads": kv, "tp": lane.tp},
            )
    refusal = dcp_sliding_refusal(arch, lane.engine, lane.dcp)
    if refusal is not None:
        ctx.report(
            rule,
            severity="deny",
            lane=lane,
            message=f"{refusal.message} ({refusal.source})",
            detail={"dcp": lane.dcp, "refusal": refusal.code},
        )
    if lane.pp > arch.layers:
        ctx.report(
            rule,
            severity="deny",
            lane=lane,
            message=f"pp {lane.pp} is more than the {arch.layers} layers of model {model.name}",
            detail={"pp": lane.pp, "layers": arch.layers},
        )


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)
