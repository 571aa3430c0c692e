"""Paths in the daemon's settings: `~`, systemd's directory variables, relative to the file.

Split from `config` so the sections there read as the file's schema; these
helpers are what every path-valued key runs through.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo

_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_SCP_LIKE = re.compile(r"^(?:[^@/:]+@)?[A-Za-z0-9.-]+:(?!//)")


def env_of(info: ValidationInfo) -> Mapping[str, str]:
    ctx = info.context
    if isinstance(ctx, Mapping) and isinstance(ctx.get("env"), Mapping):
        env: Mapping[str, str] = ctx["env"]
        return env
    return os.environ


def base_dir_of(info: ValidationInfo) -> Path | None:
    ctx = info.context
    if isinstance(ctx, Mapping) and ctx.get("base_dir") is not None:
        return Path(ctx["base_dir"])
    return None


def first_dir(env: Mapping[str, str], name: str) -> Path | None:
    """systemd joins several directories of one kind with ':'; the first is ours."""
    value = env.get(name, "")
    first = value.split(":")[0]
    return Path(first) if first else None


def expand_path(value: str | Path, env: Mapping[str, str], base_dir: Path | None) -> Path:
    """`~` and `$VAR`/`${VAR}` expanded; a variable that is not set is an error, not an empty string."""

    def sub(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in env or not env[name]:
            raise ValueError(f"${name} is not set in this environment (it is set by systemd for the service)")
        return env[name].split(":")[0] if name.endswith("_DIRECTORY") else env[name]

    text = _VAR.sub(sub, str(value))
    path = Path(text).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return path


def is_remote_url(url: str) -> bool:
    """ssh://, https://, file:// and scp-like `git@host:team/repo.git` are remote; anything else is a local path."""
    return "://" in url or bool(_SCP_LIKE.match(url))


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


def path_or_none(value: Any, info: ValidationInfo) -> Any:
    if value is None or value == "":
        return None
    if isinstance(value, str | Path):
        return expand_path(value, env_of(info), base_dir_of(info))
    return value


def same_path(a: Path, b: Path) -> bool:
    """Whether two paths name one folder (normalised, symlinks resolved where they exist)."""
    return os.path.realpath(a) == os.path.realpath(b)
