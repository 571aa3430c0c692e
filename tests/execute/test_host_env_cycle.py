"""Per-rank values from the hosts (`host_env`) through a whole cycle on the simulated Sparks.

The production lane takes each rank's RoCE v2 GID index from its host's probe. Two Sparks of the fleet
answer with different indexes (3 and 4, as the lane's own launcher says they do): each rank gets its own,
`lanes plan` shows them host by host, and each container runs with its host's. A host whose RDMA devices
the probe cannot read leaves its value unknown: the lane is blocked naming host and fact, nothing stopped.
"""

from __future__ import annotations

import io
import itertools
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rich.console import Console

from reconciler.cli.planview import plan_to_json, print_plan
from reconciler.source.loadcommit import LoadedCommit
from tests.support.example import PRODUCTION, example_policies
from tests.support.world import World, sim_world

pytestmark = pytest.mark.timeout(90)
_salt = itertools.count(41)
GID_VARS = ("B12X_ROCE_GID_INDEX", "NCCL_IB_GID_INDEX")


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    base = f"127.{200 + os.getpid() % 40}.{next(_salt) % 250}."
    async with sim_world(tmp_path, base_address=base) as w:
        yield w


def container_env(world: World, host: str, name: str) -> dict[str, str]:
    env = world.fleet.runtime(host).containers[name].env
    return dict(item.split("=", 1) for item in env)


async def test_each_rank_runs_with_its_own_hosts_gid_index_and_an_unread_one_blocks_the_lane(world: World) -> None:
    for hca in world.fleet.runtime("dgx2").facts.info.rdma.values():  # type: ignore[union-attr]
        hca.gids_before = 1  # another GID ahead of the IPv4 ones: its fabric address's v2 GID is at 4
    loaded = LoadedCommit(world.state.commit, world.state, example_policies())

    planned = await world.runner.run_cycle(loaded, apply=False)
    lane = next(lp for lp in planned.plan.lanes if lp.lane == PRODUCTION)
    assert lane.action == "deploy"
    gids = {host: dict(values)["B12X_ROCE_GID_INDEX"] for host, values in lane.per_host}
    assert gids == {"dgx1": "3", "dgx2": "4", "dgx3": "3", "dgx4": "3"}
    shown = next(x for x in plan_to_json(planned)["lanes"] if x["name"] == PRODUCTION)["per_host"]
    assert shown["dgx2"]["NCCL_IB_GID_INDEX"] == "4" and shown["dgx1"]["HOST_IP"] == "192.168.100.11"
    console = Console(file=io.StringIO(), width=400, record=True)
    print_plan(planned, console)
    text = " ".join(console.export_text().split())  # lines wrapped at the terminal's width joined
    assert "on dgx2: B12X_ROCE_GID_INDEX=4 B12X_ROCE_HCA=rocep1s0f0,roceP2p1s0f0 HOST_IP=192.168.100.12" in text

    applied = await world.runner.run_cycle(loaded)
    assert {r.lane: r.result for r in applied.results}[PRODUCTION] == "applied"
    for rank, host in enumerate(("dgx1", "dgx2", "dgx3", "dgx4")):
        env = container_env(world, host, f"lanes-{PRODUCTION}-r{rank}")
        assert {env[v] for v in GID_VARS} == {gids[host]}, (host, env)

    # dgx3's RDMA devices unreadable to the probe: its index is unknown, so the spec cannot be rendered whole.
    world.fleet.runtime("dgx3").facts.info.rdma = None
    again = await world.runner.run_cycle(loaded)
    lane = next(lp for lp in again.plan.lanes if lp.lane == PRODUCTION)
    assert (lane.action, lane.cause.value) == ("blocked", "host-facts")
    assert lane.reason.startswith("dgx3: host_env B12X_ROCE_GID_INDEX: roce_gid_index; dgx3: host_env")
    assert lane.reason.endswith("not read by the probe; nothing was stopped")
    assert container_env(world, "dgx3", f"lanes-{PRODUCTION}-r2")["B12X_ROCE_GID_INDEX"] == "3"  # still running
