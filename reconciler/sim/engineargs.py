"""How the engine stand-in reads an engine's command line and its behaviour switches.

A renderer produces a real engine's argv (`vllm serve MODEL --port 8000`,
`python3 -m sglang.launch_server --model-path P ...`); the stand-in and the
simulated runtime both need the port and the served model name out of it
without understanding every engine, so the scan is tolerant: known flags are
picked up wherever they are, anything else is ignored. Stdlib only (the
stand-in imports this and must start fast).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_PORT = 8000
DEFAULT_MAX_MODEL_LEN = 8192


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
    version: str = "0.0.0+standin"  # STANDIN_VERSION

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
            version=env.get("STANDIN_VERSION") or "0.0.0+standin",
        )
