"""Ranks meet on the data plane: each rig host's second network (eth1 on its own bridge), never the SSH one.

Every rank of the two multi-node lanes below runs a real TCP rendezvous
(`reconciler.sim.rendezvous`, as torch.distributed's store) before the
stand-in: rank 0 listens on the address lanes gave it, the others connect,
and rank 0 logs where each came from. A lane whose hosts share no data-plane
subnet is denied before anything runs.
"""

from __future__ import annotations

import pytest

from tests.rig.fleet import converged, fleet_view, result_of
from tests.rig.machine import FABRIC_SUBNET, STANDIN_ARGS, SUBNET
from tests.rig.rig import Rig

pytestmark = [pytest.mark.rig, pytest.mark.timeout(300)]

RENDEZVOUS = ("python3", "-m", "reconciler.sim.rendezvous", "--")


def meeting_lane(rig: Rig, name: str, hosts: tuple[str, ...], port: int) -> dict[str, object]:
    served = f"{name}-model"
    args = [*RENDEZVOUS, *STANDIN_ARGS, "--port", str(port), "--served-model-name", served]
    return rig.lane(name, hosts, port=port, args=args, served=served)


def test_two_multi_node_lanes_rendezvous_on_the_data_plane_addresses(rig: Rig) -> None:
    quad, pair = ("rig1", "rig2", "rig3", "rig4"), ("rig3", "rig4")
    rig.publish({"quad": meeting_lane(rig, "quad", quad, 8000), "pair": meeting_lane(rig, "pair", pair, 8100)},
                "two multi-node lanes, pair's head on a host quad also uses")  # fmt: skip

    run = converged(rig)

    assert result_of(run, "quad")["result"] == "applied" and result_of(run, "pair")["result"] == "applied"
    view = fleet_view(rig)
    for lane, hosts, port in (("quad", quad, 8000), ("pair", pair, 8100)):
        head = rig.hosts[hosts[0]]
        for rank, host in enumerate(hosts):
            c = view[host][f"lanes-{lane}-r{rank}"]
            env = dict(e.split("=", 1) for e in c.env)
            assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == (head.fabric_address, str(port + 20000)), env
            assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "eth1"
            assert env["NCCL_IB_DISABLE"] == "1"  # a veth has no RoCE device: said, not discovered by a timeout
            assert not any(SUBNET + "." in value for value in env.values()), "no rank is told an SSH address"
            assert not any(SUBNET + "." in arg for arg in c.args)
            assert c.status == "running"
        logs = rig.ssh(hosts[0], ["docker", "logs", f"lanes-{lane}-r0"]).stdout
        for rank, host in enumerate(hosts[1:], start=1):
            assert f"rank {rank} joined from {rig.hosts[host].fabric_address}" in logs, logs
        assert f"met on {head.fabric_address}:{port + 20000}" in logs, logs


def test_a_lane_on_hosts_with_no_data_plane_path_is_denied_before_anything_runs(rig: Rig) -> None:
    rig.publish(
        {"pair": meeting_lane(rig, "pair", ("rig1", "rig4"), 8100)},
        "rig4's port moved to another subnet",
        hosts={"rig4": {"data_plane": [{"interface": "eth1", "address": "10.215.47.14/24"}]}},
    )
    try:
        run = rig.apply()

        assert run.returncode == 1, run.describe()
        pair = result_of(run, "pair")
        assert pair["result"] == "denied", run.describe()
        assert "rig1 and rig4 share no data-plane subnet" in pair["error"], pair
        assert f"{FABRIC_SUBNET}.11/24 on eth1" in pair["error"] and "10.215.47.14/24 on eth1" in pair["error"]
        assert all(containers == {} for containers in fleet_view(rig).values())
    finally:  # the state repo outlives this test: rig4's port goes back on the fabric for the next ones
        fabric = [{"interface": "eth1", "address": f"{rig.hosts['rig4'].fabric_address}/24"}]
        rig.publish({}, "rig4's port back on the data plane", hosts={"rig4": {"data_plane": fabric}})
