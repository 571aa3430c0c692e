"""The container's memory cap against the host and the rank: part of the `memory-budget` rule.

Every rank's container runs under the fleet's `container.memory_limit` (`--memory` and `--memory-swap`,
engines/contract.py) with an OOM score that makes the kernel take it first. The cap only does its job
between two figures:

- below the host's memory: a cap at or above it never binds, so under memory pressure the host (sshd,
  the container runtime, the OS) runs out before the container does, which the cap exists to prevent;
- at or above what the rank takes: GB10's memory is one pool for CPU and GPU, so the weights, the KV
  cache and the runtime all count against it. The engine allocates its whole budget at start (vLLM's
  KV cache fills --gpu-memory-utilization x total; SGLang's static pool is --mem-fraction-static x free,
  its activations and CUDA graphs outside it; FILLS_BUDGET), so a cap under the rank's need (or under
  its budget) is a container killed while it loads or at its first long request.

The rank's figures are the memory-budget rule's own (budget.py), so the cap is judged in the engine's
terms. One finding per lane and check, naming the lane's file, the fleet field and both figures.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from reconciler.policy.budget import LaneBudget
from reconciler.policy.config import RuleSettings
from reconciler.policy.context import Context
from reconciler.policy.hardware import HARDWARE_PATH
from reconciler.policy.verdict import GIB, DetailValue, RankBudget, gib

FIELD = "container.memory_limit"

# docker/go-units size.go RAMInBytes: the size `docker run --memory` takes, its units binary (k = KiB,
# m = MiB, g = GiB; `-m 1G` sets memory.limit_in_bytes 1073741824); a bare number is bytes. The state's
# pattern (spec/fleet.py ContainerContract.memory_limit) admits only these forms.
_DOCKER_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_DOCKER_SIZE = re.compile(r"^([0-9]+)([bkmg]?)$")


def docker_bytes(text: str) -> int | None:
    """Bytes of a docker memory size as the state writes it ("112g"), None for another form."""
    found = _DOCKER_SIZE.match(text.strip().lower())
    return int(found.group(1)) * _DOCKER_UNITS[found.group(2)] if found else None


FILLS_BUDGET = frozenset({"vllm", "sglang"})
"""Engines known to allocate their whole budget at start. vllm 0.32.0 vllm/v1/worker/gpu_worker.py
`determine_available_memory`: the KV cache gets requested_memory (ceil(utilization x total)) less the
non-KV memory and CUDA graphs. sglang 0.5.19 srt/mem_cache/kv_cache_configurator.py
`_profile_available_bytes`: the pool gets what is free after the weights less (1 - mem_fraction_static) x
the free memory before them, so weights and pool fill mem_fraction_static x free. FLARE publishes no memory
semantics and a generic lane's engine gets no fraction: for them only the need is held against the cap."""


def takes(plan: LaneBudget, rank: RankBudget) -> int:
    """What the rank's engine holds once started: its whole budget, and SGLang's overhead outside it.

    Where the lane sizes the KV cache itself (vLLM --kv-cache-memory-bytes, SGLang --max-total-tokens) the
    engine allocates that instead of filling its budget, and an engine not known to fill its budget is
    taken at its need: then what it holds is what it needs."""
    if plan.kv_bytes is not None or plan.kv_tokens_cap is not None or plan.lane.engine not in FILLS_BUDGET:
        return needs(rank)
    return rank.budget + (0 if rank.overhead_inside else rank.overhead)


def needs(rank: RankBudget) -> int:
    """What the rank needs in all: weights, KV, drafter and the runtime's overhead, wherever it is counted."""
    return rank.need + (0 if rank.overhead_inside else rank.overhead)


def check_memory_cap(
    ctx: Context, rule: RuleSettings, plans: Mapping[str, LaneBudget], denied: Collection[str] = ()
) -> None:
    """`denied`: lanes whose ranks the budget check already refused (the engine would not start them at all,
    whatever the cap): the cap is not held against their figures, only against the hosts' memory."""
    contract = ctx.desired.fleet.container
    if contract.memory_limit is None:
        return
    cap = docker_bytes(contract.memory_limit)
    if cap is None:
        return
    fleet_file = _fleet_file(ctx)
    said = f"{fleet_file} {FIELD} {contract.memory_limit} ({cap / GIB:.1f} GiB)"
    for plan in plans.values():
        lane = plan.lane
        path = ctx.desired.lane_file(lane.name)
        base: dict[str, DetailValue] = {
            "file": path, "field": FIELD, "fleet_file": fleet_file,
            "memory_limit": contract.memory_limit, "memory_limit_gib": gib(cap),
        }  # fmt: skip
        _check_host(ctx, rule, plan, cap, said, base)
        if not plan.ranks or lane.name in denied:
            continue
        worst = max(plan.ranks, key=needs)
        where = f"rank {worst.rank} on {worst.host}"
        engine = {"vllm": "vLLM", "sglang": "SGLang", "flare": "FLARE"}.get(lane.engine, "the engine")
        if needs(worst) > cap:
            ctx.report(
                rule,
                severity="deny",
                lane=lane,
                host=worst.host,
                rank=worst.rank,
                message=(
                    f"{path}: {where} needs {needs(worst) / GIB:.1f} GiB (weights, KV for max_model_len "
                    f"{lane.max_model_len}, drafter and the runtime's overhead) but every rank's container is "
                    f"capped at {said}, so the kernel kills the container once it holds that much; raise "
                    f"{FIELD} or lower what the rank holds (max_model_len, more ranks)"
                ),
                detail={**base, "rank_need": needs(worst), "rank_need_gib": gib(needs(worst))},
            )
            continue
        heaviest = max(plan.ranks, key=lambda r: takes(plan, r))
        held = takes(plan, heaviest)
        if held > cap:
            ctx.report(
                rule,
                severity="deny",
                lane=lane,
                host=heaviest.host,
                rank=heaviest.rank,
                message=(
                    f"{path}: rank {heaviest.rank} on {heaviest.host} needs {needs(heaviest) / GIB:.1f} GiB, "
                    f"but {engine} takes its whole budget at start, {held / GIB:.1f} GiB "
                    f"({heaviest.flag} {heaviest.utilization:.2f}"
                    f"{'' if heaviest.overhead_inside else ' and the overhead outside it'}), over the cap of "
                    f"{said}: the kernel kills the container as the engine allocates it; lower "
                    f"gpu_memory_utilization or raise {FIELD}"
                ),
                detail={**base, "rank_takes": held, "rank_takes_gib": gib(held)},
            )


def _check_host(
    ctx: Context, rule: RuleSettings, plan: LaneBudget, cap: int, said: str, base: Mapping[str, DetailValue]
) -> None:
    lane = plan.lane
    over = []
    for host in lane.hosts:
        capacity = ctx.capacity(host)
        if capacity is not None and cap >= capacity.memory_total:
            over.append((host, capacity))
    if not over:
        return
    host, capacity = min(over, key=lambda o: (o[1].memory_total, o[0]))
    hosts = ", ".join(h for h, _ in over)
    ctx.report(
        rule,
        severity="deny",
        lane=lane,
        host=host,
        message=(
            f"{ctx.desired.lane_file(lane.name)}: its ranks run under {said}, at or above the "
            f"{capacity.memory_total / GIB:.1f} GiB of memory of {hosts} ({HARDWARE_PATH} "
            f"{capacity.profile}.memory_total): the cap never binds, so under memory pressure the host runs out "
            f"before the container and takes sshd with it; set {FIELD} below the host's memory"
        ),
        detail={**base, "host_memory": capacity.memory_total, "host_memory_gib": gib(capacity.memory_total)},
    )


def _fleet_file(ctx: Context) -> str:
    """Where the fleet's defaults live, beside the lanes folder the lane files came from."""
    for name, path in ctx.desired.files.items():
        if name.startswith("lanes/") and "/lanes/" in path:
            return path.rsplit("/lanes/", 1)[0] + "/fleet.yaml"
    return "fleet.yaml"
