"""How the engine stand-in reads an engine's command line and its behaviour switches.

A renderer produces a real engine's argv (`vllm serve MODEL --port 8000`,
`python3 -m sglang.launch_server --model-path P ...`); the stand-in and the
simulated runtime both need the port and the served model name out of it
without understanding every engine, so the scan is tolerant: known flags are
picked up wherever they are, anything else is ignored. Stdlib only (the
stand-in imports this and must start fast).

Before it scans, the stand-in lets the engine's own parser judge the command
line (`engine_refusal`): with the flag table of the image's engine release
(STANDIN_VERSION), an unknown flag or a bad choice ends it the way argparse
ends the engine, usage and `error:` on stderr, exit status 2.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_PORT = 8000
DEFAULT_MAX_MODEL_LEN = 8192
DEFAULT_VERSION = "0.0.0+standin"
"""What the stand-in reports when its image names no engine release; no flag table is looked up for it."""


@dataclass(frozen=True)
class EngineArgs:
    """What the stand-in needs from an engine command line."""

    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    model: str = "default"
    served_model_name: str | None = None
    max_model_len: int = DEFAULT_MAX_MODEL_LEN

    @property
    def served_name(self) -> str:
        return self.served_model_name or self.model


def scan_engine_argv(argv: Sequence[str]) -> EngineArgs:
    """Pick port, host, model and served name out of any engine's argv, tolerantly."""
    values: dict[str, str] = {}
    wanted = {
        "--port": "port",
        "--host": "host",
        "--served-model-name": "served",
        "--model-path": "model",
        "--model": "model",
        "--max-model-len": "max_len",
        "--context-length": "max_len",  # SGLang's name for it
    }
    args = list(argv)
    for i, word in enumerate(args):
        flag, eq, inline = word.partition("=")
        if flag in wanted:
            value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
            if value and not value.startswith("--"):
                values.setdefault(wanted[flag], value)
        elif word == "serve" and i + 1 < len(args) and not args[i + 1].startswith("-"):
            values.setdefault("model", args[i + 1])
    port = parse_int(values.get("port"), DEFAULT_PORT)
    return EngineArgs(
        host=values.get("host", "0.0.0.0"),
        port=port,
        model=values.get("model", "default"),
        served_model_name=values.get("served"),
        max_model_len=parse_int(values.get("max_len"), DEFAULT_MAX_MODEL_LEN),
    )


def engine_refusal(argv: Sequence[str], version: str, parser: str = "") -> tuple[int, str] | None:
    """(exit status, stderr) when the engine of this release would refuse its command line, else None.

    The engine and where its own arguments start are read from the command (`vllm serve ...`, also
    after the Ray head's shell prelude; `python3 -m sglang.launch_server ...`); a Ray worker's
    `ray start` runs no engine parser. The judgement is `lanes check`'s own (reconciler.engines.flags,
    imported only here, so a stand-in without an engine release starts as fast as before), and only a
    table written for this build or release judges (`TableMatch.placed`: in the simulation a build runs
    the parser of the release scripts/flag_tables.py placed it at, though `lanes check` only warns about
    it); a series' nearest release's table is a guess. Where lanes'
    packages are absent (the rig's image holds only the stand-in's modules), nothing is judged.
    """
    if (not version or version == DEFAULT_VERSION) and not parser:
        return None
    try:
        from reconciler.engines import flags
    except ImportError:
        return None
    found = flags.detect(argv)
    if found is None:
        return None
    engine, _, args = found
    return parser_refusal(engine, args, version, parser)


def parser_refusal(engine: str, args: Sequence[str], version: str, parser: str = "") -> tuple[int, str] | None:
    """(exit status, stderr) when the image's parser refuses these engine arguments, else None.

    The image's parser is the table its STANDIN_PARSER names (a build whose own parser lanes ships no
    table of: `vllm-0.33.0`, a shipped table's name, or the path of a table's JSON), else the table
    written for its release or build (as `engine_refusal`). Both the stand-in's start and the
    simulated docker's preflight run (`sim/dockerd.py`) judge with it, as one image has one parser.
    """
    try:
        from reconciler.engines import flags
    except ImportError:
        return None
    table = image_table(flags, engine, version, parser)
    if table is None:
        return None
    error = flags.check_argv(table, args)
    return None if error is None else (error.status, error.stderr())


def image_table(flags: Any, engine: str, version: str, parser: str) -> Any:
    """The flag table standing for the image's own parser (None: the image judges nothing)."""
    if parser:
        if parser.endswith(".json"):
            with open(parser, encoding="utf-8") as handle:
                return flags.load_table(json.load(handle))
        return next((t for t in flags.tables() if f"{t.engine}-{t.version}" == parser), None)
    if not version or version == DEFAULT_VERSION:
        return None
    match = flags.table_for(engine, version)
    return match.table if match is not None and match.placed else None


def parse_int(raw: str | None, default: int) -> int:
    try:
        return int(raw) if raw is not None else default
    except ValueError:
        return default


def _float_env(env: dict[str, str], key: str, default: float) -> float:
    try:
        return float(env[key]) if env.get(key) else default
    except ValueError:
        return default


@dataclass(frozen=True)
class Behaviour:
    """The environment switches (an image's behaviour plus the container's env)."""

    load_s: float = 0.0  # STANDIN_LOAD_S
    port_delay_s: float = 0.0  # STANDIN_PORT_DELAY_S
    pp_tps: float = 2000.0  # STANDIN_PP_TPS
    tg_tps: float = 50.0  # STANDIN_TG_TPS
    never_healthy: bool = False  # STANDIN_NEVER_HEALTHY=1
    crash_after_s: float | None = None  # STANDIN_CRASH_AFTER_S
    wrong_model: bool = False  # STANDIN_WRONG_MODEL=1
    slowdown: float = 1.0  # STANDIN_SLOWDOWN
    version: str = DEFAULT_VERSION  # STANDIN_VERSION: the engine release the image carries
    load_log_lines: int = 0  # STANDIN_LOAD_LOG_LINES: lines logged evenly over the load, as engines log progress
    parser: str = ""  # STANDIN_PARSER: the image's own parser, a flag table's name or path (parser_refusal)

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Behaviour:
        crash = _float_env(env, "STANDIN_CRASH_AFTER_S", -1.0)
        return cls(
            load_s=_float_env(env, "STANDIN_LOAD_S", 0.0),
            port_delay_s=_float_env(env, "STANDIN_PORT_DELAY_S", 0.0),
            pp_tps=max(_float_env(env, "STANDIN_PP_TPS", 2000.0), 1e-3),
            tg_tps=max(_float_env(env, "STANDIN_TG_TPS", 50.0), 1e-3),
            never_healthy=env.get("STANDIN_NEVER_HEALTHY") == "1",
            crash_after_s=crash if crash >= 0 else None,
            wrong_model=env.get("STANDIN_WRONG_MODEL") == "1",
            slowdown=max(_float_env(env, "STANDIN_SLOWDOWN", 1.0), 1e-3),
            version=env.get("STANDIN_VERSION") or DEFAULT_VERSION,
            load_log_lines=max(int(_float_env(env, "STANDIN_LOAD_LOG_LINES", 0.0)), 0),
            parser=env.get("STANDIN_PARSER", ""),
        )
