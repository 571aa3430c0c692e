"""The repository's own example fleet, loaded from the files on disk, as tests use it.

Besides the fleet itself: the names tests refer to (lanes, the hosts of the running lanes, their image
repositories) and variants with readiness timeouts short enough for a test.
"""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from reconciler.source.loadcommit import LoadedCommit
from reconciler.spec.lane import Health, Lane
from reconciler.spec.load import DesiredState, PolicySet, load_desired, load_policies

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = "dsv41-flash-1017-4x-sglang"
GLM = "glm53-mxfp4-fp8-4x-r39"
EUGR = "eugr-nightly-dsv41-3x"
MINIMAX = "minimax-m31-flash-4x-flare"
PROD_HOSTS = ("dgx1", "dgx2", "dgx3", "dgx4")  # where the example fleet runs PRODUCTION
EUGR_HOSTS = ("dgx5", "dgx6", "dgx7")  # and EUGR
PROD_REPO = "aidendle94/sparkrun-sglang-dsv41-gb10"  # the running lanes' image repositories
EUGR_REPO = "eugr/spark-vllm-b12x"
LANE_DIR = "state/lanes"

FAST_HEALTH = Health(
    port_timeout_s=10, ready_timeout_s=10, models_timeout_s=5, completion_timeout_s=5, poll_interval_s=0.2
).model_dump()
"""Readiness timeouts and polls for tests, which do not wait like a 20-minute model load."""

NEVER_READY_HEALTH = {**FAST_HEALTH, "ready_timeout_s": 2}
"""For a spec whose engine listens but never answers /health 200 (`STANDIN_NEVER_HEALTHY`): its gate ends at the
health timeout whatever its length, and a test of what follows (the rollback, what is told, what is stored) need
not wait out FAST_HEALTH's 10 s for it (issue 27). A test of the wait itself keeps its own gate."""


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


def loaded(desired: DesiredState) -> LoadedCommit:
    """`desired` with the example policies, as the reconciler takes a commit."""
    return LoadedCommit(desired.commit, desired, example_policies())


def with_lane(state: DesiredState, name: str, commit: str | None = None, **changes: Any) -> DesiredState:
    """A copy of the state with one lane changed (validated again)."""
    lane = state.lanes[name]
    data = lane.model_dump()
    data.update(changes)
    lanes = {**state.lanes, name: Lane.model_validate(data)}
    return replace(state, commit=commit or state.commit, lanes=lanes)


def without_lane(desired: DesiredState, name: str) -> DesiredState:
    return replace(desired, lanes={k: v for k, v in desired.lanes.items() if k != name})


def fast(desired: DesiredState, **health: Any) -> DesiredState:
    """The running lanes (PRODUCTION, EUGR) with FAST_HEALTH, and `health` on top."""
    for lane in (PRODUCTION, EUGR):
        desired = with_lane(desired, lane, health={**FAST_HEALTH, **health})
    return desired


def lane_yaml(state: DesiredState, name: str, **changes: Any) -> bytes:
    """A lane's file as a person writes it, with `changes`."""
    data = state.lanes[name].model_dump(mode="json", exclude={"name"})
    data.update(changes)
    out = io.StringIO()
    yaml = YAML()  # round-trip style, block layout: what a person's file looks like
    yaml.default_flow_style = False
    yaml.width = 4096  # long image references stay on one line, as people write them
    yaml.dump({k: v for k, v in data.items() if v is not None}, out)
    return out.getvalue().encode("utf-8")


def fast_files(**lane_changes: dict[str, Any]) -> dict[str, bytes]:
    """The example state's files with fast readiness timeouts on the running lanes (and changes per lane)."""
    state = fast(example_state())
    files = repo_files()
    for name in state.lanes:
        files[f"{LANE_DIR}/{name}.yaml"] = lane_yaml(state, name, **lane_changes.get(name, {}))
    return files


SPARE_HOSTS = ("dgx8", "dgx9", "dgx10", "dgx11")
"""Four Sparks beyond the example fleet's seven, free for trials."""


def with_spare_hosts(files: dict[str, bytes], hosts: tuple[str, ...] = SPARE_HOSTS) -> dict[str, bytes]:
    """`files` with a host file for each spare host (an address and a data-plane port, as the fleet's)."""
    for i, host in enumerate(hosts):
        files[f"state/hosts/{host}.yaml"] = (
            f"address: 10.20.0.{21 + i}\n"
            f"data_plane: [{{interface: enp1s0f0np0, address: 192.168.100.{21 + i}/24, hca: rocep1s0f0}}]\n"
        ).encode()
    return files
