"""Values that differ per rank (`host_env`): each rank's own, from its host file and from its host's probe.

The production lane takes from each host what its own launcher passes per node (sparkrun-recipes'
launch-sgl-dsv41.sh, run_cmd): the RoCE v2 GID index of the rank's fabric IPv4 on its first RoCE device
(probed: "3 on some, 4 on others in the same fleet"), its RoCE devices, the fabric subnet's prefix length and
its fabric address. The golden file holds the ranks as two hosts with different GID indexes render them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from reconciler.engines import render_lane
from reconciler.engines.hostfacts import placeholders, unresolved
from reconciler.errors import InputError
from reconciler.facts.hostinfo import HostInfo, RdmaDevice
from reconciler.spec import load_desired
from reconciler.spec.load import DesiredState

from .golden import assert_golden

pytestmark = pytest.mark.timeout(30)

REPO = Path(__file__).resolve().parents[2]
PRODUCTION = "dsv41-flash-1017-4x-sglang"
GIDS = {"dgx1": 3, "dgx2": 4, "dgx3": 3, "dgx4": 4}
"""The index of each host's RoCE v2 GID for its fabric address: two values in one fleet, as that launcher says."""


def _desired() -> DesiredState:
    root = REPO / "state"
    return load_desired(
        {p.relative_to(REPO).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}, "e" * 40
    )


def _probed(desired: DesiredState, gids: dict[str, int]) -> dict[str, HostInfo]:
    """What a probe reads of each host's RoCE devices: the fabric port's HCA with a v2 GID for its address."""
    out = {}
    for name, index in gids.items():
        devices = tuple(
            RdmaDevice(p.hca, (p.interface,), "4: ACTIVE", {p.ip: index})
            for p in desired.hosts[name].data_plane
            if p.hca is not None
        )
        out[name] = HostInfo(rdma=devices)
    return out


def _render(desired: DesiredState, lane: str, info: dict[str, HostInfo] | None) -> list[dict[str, str]]:
    spec = desired.lanes[lane]
    specs = render_lane(spec, desired.models[spec.model], desired.fleet, desired.hosts, desired.commit, info)
    return [s.env_map for s in specs]


def test_each_rank_gets_its_own_hosts_values() -> None:
    desired = _desired()
    envs = _render(desired, PRODUCTION, _probed(desired, GIDS))
    for rank, env in enumerate(envs):
        host = desired.lanes[PRODUCTION].hosts[rank]
        fabric = desired.hosts[host].data_plane[0]
        assert env["B12X_ROCE_GID_INDEX"] == env["NCCL_IB_GID_INDEX"] == str(GIDS[host])
        assert env["B12X_ROCE_HCA"] == env["NCCL_IB_HCA"] == "rocep1s0f0,roceP2p1s0f0"
        assert env["NCCL_IB_SUBNET_PREFIX_LEN"] == "24" and env["HOST_IP"] == fabric.ip
        assert env["SPARK_ROCE_AR"] == "1"  # the launcher's one-shot RDMA collectives, now that the GID is known
    assert len({env["B12X_ROCE_GID_INDEX"] for env in envs}) == 2


def test_the_production_lanes_ranks_on_hosts_with_different_gid_indexes_golden() -> None:
    desired = _desired()
    spec = desired.lanes[PRODUCTION]
    specs = render_lane(
        spec, desired.models[spec.model], desired.fleet, desired.hosts, desired.commit, _probed(desired, GIDS)
    )
    assert_golden(f"example-{PRODUCTION}-probed", specs)
    assert not [v for s in specs for v in placeholders(s.env)]


def test_a_fact_the_probe_has_not_read_is_a_placeholder_the_planner_refuses_to_start() -> None:
    desired = _desired()
    unprobed = _render(desired, PRODUCTION, None)  # `lanes check`: no probe
    assert unprobed[1]["B12X_ROCE_GID_INDEX"] == unresolved("roce_gid_index", "dgx2")
    assert unprobed[1]["B12X_ROCE_HCA"] == "rocep1s0f0,roceP2p1s0f0"  # from the host file: known without a probe
    # A probe that found no RoCE v2 GID for dgx3's fabric address leaves dgx3's value unread, the others' read.
    partly = _render(desired, PRODUCTION, _probed(desired, {**GIDS, "dgx3": 0}) | {"dgx3": HostInfo(rdma=())})
    assert [placeholders(env.items()) for env in partly] == [
        [],
        [],
        ["B12X_ROCE_GID_INDEX: roce_gid_index", "NCCL_IB_GID_INDEX: roce_gid_index"],
        [],
    ]


def test_a_fact_a_lane_cannot_have_is_refused_naming_the_variable() -> None:
    desired = _desired()
    ring = "eugr-nightly-dsv41-3x"  # its three hosts are cabled as a ring: no one fabric port is a rank's
    lane = desired.lanes[ring].model_copy(update={"host_env": {"X_GID": "roce_gid_index"}})
    on_ring = dataclasses.replace(desired, lanes={**desired.lanes, ring: lane})
    with pytest.raises(InputError, match=r"host_env X_GID .*ring") as caught:
        _render(on_ring, ring, None)
    assert caught.value.field == "host_env.X_GID"


def test_a_variable_has_one_value_a_host_fact_or_a_plain_one() -> None:
    desired = _desired()
    data = desired.lanes[PRODUCTION].model_dump()
    data["env"] = {**data["env"], "HOST_IP": "192.168.100.11"}
    with pytest.raises(ValueError, match="host_env: HOST_IP also set in env"):
        type(desired.lanes[PRODUCTION]).model_validate(data)
