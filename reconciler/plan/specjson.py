"""Rank specs to and from JSON: the journal keeps the last healthy specs, for a rollback and for the planner
(which repairs what serves while a failed spec is held)."""

from __future__ import annotations

import dataclasses
from typing import Any

from reconciler.engines import ContainerSpec
from reconciler.spec.lane import Mount


def spec_to_json(host: str, spec: ContainerSpec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(spec):
        value = getattr(spec, f.name)
        if f.name == "mounts":
            value = [m.model_dump() for m in value]
        elif isinstance(value, tuple):
            value = [list(v) if isinstance(v, tuple) else v for v in value]
        out[f.name] = value
    return {"host": host, "spec": out}


def spec_from_json(data: dict[str, Any]) -> tuple[str, ContainerSpec]:
    raw = dict(data["spec"])
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(ContainerSpec):
        if f.name not in raw:
            continue
        value = raw[f.name]
        if f.name == "mounts":
            value = tuple(Mount(**m) for m in value)
        elif isinstance(value, list):
            value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
        kwargs[f.name] = value
    return str(data["host"]), ContainerSpec(**kwargs)
