"""The repository's own example fleet, loaded from the files on disk, for tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reconciler.spec.lane import Lane
from reconciler.spec.load import DesiredState, PolicySet, load_desired, load_policies

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION = "dsv41-flash-1017-4x-sglang"
GLM = "glm53-mxfp4-fp8-4x-r39"
EUGR = "eugr-nightly-dsv41-3x"
MINIMAX = "minimax-m31-flash-4x-flare"


def repo_files() -> dict[str, bytes]:
    out = {}
    for folder in ("state", "policies"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file():
                out[str(path.relative_to(ROOT))] = path.read_bytes()
    return out


def example_state(commit: str = "c0ffee0000000000000000000000000000000001") -> DesiredState:
    return load_desired(repo_files(), commit)


def example_policies() -> PolicySet:
    return load_policies(repo_files())


def with_lane(state: DesiredState, name: str, commit: str | None = None, **changes: Any) -> DesiredState:
    """A copy of the state with one lane changed (validated again)."""
    lane = state.lanes[name]
    data = lane.model_dump()
    data.update(changes)
    lanes = dict(state.lanes)
    lanes[name] = Lane.model_validate(data)
    return DesiredState(
        commit=commit or state.commit,
        fleet=state.fleet,
        hosts=state.hosts,
        models=state.models,
        lanes=lanes,
        upstreams=state.upstreams,
        files=state.files,
        bench_profiles=state.bench_profiles,
    )


def without_lane(desired: DesiredState, name: str) -> DesiredState:
    lanes = {k: v for k, v in desired.lanes.items() if k != name}
    return DesiredState(
        commit=desired.commit,
        fleet=desired.fleet,
        hosts=desired.hosts,
        models=desired.models,
        lanes=lanes,
        upstreams=desired.upstreams,
        files=desired.files,
        bench_profiles=desired.bench_profiles,
    )
