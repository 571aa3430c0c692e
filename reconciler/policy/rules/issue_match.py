"""Does one lane have the configuration a known issue needs? The `when` of an entry, read against a lane.

Most limits upstream are not a version but a combination: the kernel a
backend ships on the lane's hardware, for the model's attention kind, with a
flag the lane sets. So a condition can name what lanes can know before
anything starts: the lane's own fields and argv, its env, the model's
architecture, the hardware profile of its hosts, and the other lanes placed
on those hosts.

vLLM's attention backend is read from where vLLM reads it: `--attention-backend`,
the `backend` key of `--attention-config` (JSON, or the dotted
`--attention-config.backend`), and the `VLLM_ATTENTION_BACKEND` environment
variable (vllm-project/vllm vllm/platforms/cuda.py, `attention_config.backend`;
the flag and the variable as the sparkrun and eugr Spark recipes pass them).
A lane that names none runs the engine's default for its hardware.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from reconciler.policy.context import Context
from reconciler.spec.lane import Lane
from reconciler.spec.model import ModelSpec
from reconciler.spec.policyfiles import IssueCondition

ATTENTION_FLAG = "--attention-backend"
ATTENTION_CONFIG_FLAG = "--attention-config"
ATTENTION_ENV = "VLLM_ATTENTION_BACKEND"


def flag_values(args: tuple[str, ...], flag: str) -> Iterator[str]:
    """Every value given to `flag`, as '--flag value' or '--flag=value'."""
    for index, arg in enumerate(args):
        if arg == flag and index + 1 < len(args):
            yield args[index + 1]
        elif arg.startswith(flag + "="):
            yield arg[len(flag) + 1 :]


def attention_backends(lane: Lane) -> set[str]:
    """The attention backends a lane names, upper-cased as vLLM's enum spells them; empty is the default."""
    named = set(flag_values(lane.args, ATTENTION_FLAG))
    named.update(flag_values(lane.args, ATTENTION_CONFIG_FLAG + ".backend"))
    for text in flag_values(lane.args, ATTENTION_CONFIG_FLAG):
        try:
            config = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(config, dict) and isinstance(config.get("backend"), str):
            named.add(config["backend"])
    if lane.env.get(ATTENTION_ENV):
        named.add(lane.env[ATTENTION_ENV])
    return {name.strip().upper() for name in named if name.strip()}


def _folded(values: tuple[str, ...]) -> set[str]:
    return {v.lower() for v in values}


def _args_hold(when: IssueCondition, lane: Lane) -> bool:
    for flag in when.args_include:
        if not any(arg == flag or arg.startswith(flag + "=") for arg in lane.args):
            return False
    for flag, wanted in when.arg_values.items():
        if not _folded(tuple(flag_values(lane.args, flag))) & _folded(wanted):
            return False
    return not any(lane.env.get(name, "").lower() in _folded(off) for name, off in when.unless_env.items())


def _model_holds(when: IssueCondition, model: ModelSpec | None) -> bool:
    if when.quantization:
        quant = model.quantization.lower() if model is not None else ""
        if quant not in _folded(when.quantization):
            return False
    if when.moe is not None and (model is None or (model.moe is not None) != when.moe):
        return False
    if when.attention and (model is None or model.architecture.attention not in when.attention):
        return False
    sparse = None if model is None else model.architecture.index_head_dim is not None
    return when.sparse_attention is None or sparse == when.sparse_attention


def _placement_holds(when: IssueCondition, lane: Lane, ctx: Context) -> bool:
    if when.hardware:
        profiles = {host.hardware for name in lane.hosts if (host := ctx.host(name)) is not None}
        if not profiles & set(when.hardware):
            return False
    if when.shares_host is not None:
        shared = any(other.name != lane.name for host in lane.hosts for other in ctx.running_by_host.get(host, ()))
        if shared != when.shares_host:
            return False
    return True


def conditions_hold(when: IssueCondition, lane: Lane, model: ModelSpec | None, ctx: Context) -> bool:
    """Every condition the entry sets holds for this lane."""
    if when.kv_cache_dtype and lane.kv_cache_dtype not in when.kv_cache_dtype:
        return False
    floors = ((when.min_ep, lane.ep), (when.min_tp, lane.tp), (when.min_pp, lane.pp), (when.min_dcp, lane.dcp))
    if any(floor is not None and value < floor for floor, value in floors):
        return False
    if when.min_gpu_memory_utilization is not None and lane.gpu_memory_utilization < when.min_gpu_memory_utilization:
        return False
    if when.launcher is not None and lane.launcher != when.launcher:
        return False
    if when.attention_backend_not and attention_backends(lane) & {b.upper() for b in when.attention_backend_not}:
        return False
    return _args_hold(when, lane) and _model_holds(when, model) and _placement_holds(when, lane, ctx)
