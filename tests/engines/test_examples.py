"""The example fleet's lanes in state/ render, running or stopped."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.engines import render_lane, start_groups
from reconciler.facts.docker import run_argv
from reconciler.spec import load_desired

pytestmark = pytest.mark.timeout(30)

REPO = Path(__file__).resolve().parents[2]


def _state_files() -> dict[str, bytes]:
    root = REPO / "state"
    return {p.relative_to(REPO).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_example_lanes_render() -> None:
    desired = load_desired(_state_files(), "e" * 40)
    assert desired.lanes
    for lane in desired.lanes.values():
        specs = render_lane(lane, desired.models[lane.model], desired.fleet, desired.hosts, desired.commit)
        assert [s.name for s in specs] == [f"lanes-{lane.name}-r{rank}" for rank in range(lane.ranks)]
        assert sorted(r for group in start_groups(lane) for r in group) == list(range(lane.ranks))
        for spec in specs:
            argv = run_argv(spec)
            assert argv[:2] == ["docker", "run"]
            assert spec.image in argv


def test_production_lane_head_and_worker() -> None:
    desired = load_desired(_state_files(), "e" * 40)
    lane = desired.lanes["dsv41-flash-1017-4x-sglang"]
    model = desired.models[lane.model]
    head, worker, *_ = render_lane(lane, model, desired.fleet, desired.hosts, desired.commit)
    assert head.serves_http
    assert not worker.serves_http
    assert head.command[head.command.index("--node-rank") + 1] == "0"
    assert worker.command[worker.command.index("--node-rank") + 1] == "1"
    head_address = desired.hosts["dgx1"].address
    assert head.command[head.command.index("--dist-init-addr") + 1] == f"{head_address}:29500"
    assert head.secret_env == ("HF_TOKEN",)
