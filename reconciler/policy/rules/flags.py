"""`engine-flags`: every rank's command line as the engine's own parser would read it.

The `render` rule has already turned each lane into the `docker run` of its
ranks; this rule takes those specs (never rendering again), finds the
engine's own arguments in each command (`vllm serve ...`, `python3 -m
sglang.launch_server ...`; a Ray worker's `ray start` has none) and judges
them with the flag table of the lane's engine release
(`reconciler.engines.flags`): an unknown flag, a flag without its value, a
value outside its choices or not a number is what the engine would exit on
at start, so the lane is denied, naming its file, the field the flag came
from (`args` for what the lane wrote itself, else the field that rendered
it) and argparse's own sentence.

A lane whose `engine_version` has no table gets a warning: its flags are not
checked. So does a refusal by a release's table judging another build (a
main or branch build, a fork: `flagtable.table_for`), since the build may
take flags that release lacks: only a table read from the build's own
source, or a release's for that release, denies.
Generic lanes are the team's own command and are not looked at.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from reconciler.engines import ContainerSpec
from reconciler.engines.flags import (
    ENGINES_WITH_TABLES,
    ArgvError,
    TableMatch,
    check_argv,
    engine_argv,
    table_for,
)
from reconciler.policy.config import RuleSettings
from reconciler.policy.context import Context
from reconciler.spec.lane import Lane

RULE = "engine-flags"
CHECKED_ENGINES = (*ENGINES_WITH_TABLES, "flare")
"""Engines whose command lanes renders; FLARE publishes no Python package with its parser, so no table."""

Rendered = Mapping[str, tuple[tuple[str, ContainerSpec], ...]]

# Which lane field each rendered flag comes from (engines/sglang.py, engines/vllm.py); a flag not
# listed was chosen by the renderer itself (`--host 0.0.0.0`) and is reported as field `engine`.
_FIELDS: dict[str, dict[str, str]] = {
    "sglang": {
        "--model-path": "model",
        "--served-model-name": "served_model_name",
        "--port": "port",
        "--tp-size": "tp",
        "--pp-size": "pp",
        "--ep-size": "ep",
        "--dcp-size": "dcp",
        "--mem-fraction-static": "gpu_memory_utilization",
        "--context-length": "max_model_len",
        "--max-running-requests": "max_num_seqs",
        "--kv-cache-dtype": "kv_cache_dtype",
        "--nnodes": "hosts",
        "--node-rank": "hosts",
        "--dist-init-addr": "hosts",
    },
    "vllm": {
        "--served-model-name": "served_model_name",
        "--port": "port",
        "--tensor-parallel-size": "tp",
        "--pipeline-parallel-size": "pp",
        "--enable-expert-parallel": "ep",
        "--decode-context-parallel-size": "dcp",
        "--max-model-len": "max_model_len",
        "--max-num-seqs": "max_num_seqs",
        "--kv-cache-dtype": "kv_cache_dtype",
        "--gpu-memory-utilization": "gpu_memory_utilization",
        "--distributed-executor-backend": "launcher",
        "--nnodes": "hosts",
        "--node-rank": "hosts",
        "--master-addr": "hosts",
        "--master-port": "hosts",
        "--headless": "hosts",
    },
}


def field_of(lane: Lane, command: Sequence[str], start: int, error: ArgvError) -> str:
    """The lane field an argv fault comes from: `args` for the lane's own tail, else the rendering field."""
    if error.index is None:
        return "args" if lane.args else "engine"
    position = start + error.index
    if lane.args and position >= len(command) - len(lane.args):
        return "args"
    flag = (error.flag or "").split("=", 1)[0]
    if error.index == 0 and lane.engine == "vllm" and not flag.startswith("-"):
        return "model"  # `vllm serve MODEL`: the positional model tag
    return _FIELDS.get(lane.engine, {}).get(flag, "engine")


def _not_exact(match: TableMatch) -> str:
    """What the message says of a table that is not the build's own parser ('' when it is)."""
    table = match.table
    if match.exact:
        return ""
    if match.how == "chosen":
        return (
            f" (the table of release {table.version}, which stands in for this build; the build may take flags "
            "that release lacks)"
        )
    return f" (the table of the nearest release {table.version}; it may lack flags)"


def check_engine_flags(ctx: Context, rule: RuleSettings, rendered: Rendered) -> None:
    desired = ctx.desired
    for name in sorted(desired.lanes):
        lane = desired.lanes[name]
        if lane.engine not in CHECKED_ENGINES:
            continue
        path = desired.lane_file(name)
        match = table_for(lane.engine, lane.engine_version)
        if match is None:
            why = (
                "scripts/flag_tables.py writes one from the release's wheel"
                if lane.engine in ENGINES_WITH_TABLES
                else f"{lane.engine} publishes no Python package with its argument parser to write one from"
            )
            ctx.report(
                rule,
                severity="warn",
                lane=lane,
                message=(
                    f"{path}: engine_version: no flag table for {lane.engine} {lane.engine_version}, so its flags "
                    f"are not checked against the engine ({why})"
                ),
                detail={"file": path, "field": "engine_version"},
            )
            continue
        for rank, (host, spec) in enumerate(rendered.get(name, ())):
            command = [spec.entrypoint or "", *spec.command]
            found = engine_argv(lane.engine, command)
            if found is None:
                continue
            start, argv = found
            error = check_argv(match.table, argv)
            if error is None:
                continue
            field = field_of(lane, command, start, error)
            table = match.table
            nearest = _not_exact(match)
            ctx.report(
                rule,
                severity="deny" if match.exact else "warn",
                lane=lane,
                host=host,
                rank=rank,
                message=(
                    f"{path}: {field}: {lane.engine} {table.version} would refuse rank {rank}'s command line"
                    f"{nearest}: {error.prog}: error: {error.message}"
                ),
                detail={
                    "file": path,
                    "field": field,
                    "flag": error.flag or "",
                    "table": f"{table.engine}-{table.version}",
                    "wheel_sha256": table.sha256,
                    "how": match.how,
                },
            )
            break  # every rank carries the lane's flags: one finding per lane says it
