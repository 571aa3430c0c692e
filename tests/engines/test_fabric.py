"""The data plane, the container contract and the port block, as rendered for each rank."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from reconciler.engines import render_lane
from reconciler.engines.fabric import lane_network
from reconciler.engines.ports import LanePorts, listening
from reconciler.errors import InputError
from reconciler.spec import ContainerContract, DataPort, FleetDefaults, Host, ModelSpec

from .conftest import LaneFactory, Renderer

pytestmark = pytest.mark.timeout(30)


def _ring() -> list[Host]:
    """NVIDIA's connect-three-sparks addressing: one subnet per cable half, no subnet shared by all three."""
    cables = {
        "a": [("p0", "192.168.0.1/24", "r0"), ("p1", "192.168.2.1/24", "r1")],
        "b": [("p0", "192.168.4.1/24", "r0"), ("p1", "192.168.0.2/24", "r1")],
        "c": [("p0", "192.168.2.2/24", "r0"), ("p1", "192.168.4.2/24", "r1")],
    }
    return [
        Host(
            name=name,
            address=f"10.0.0.{i + 1}",
            control_interface="enP7s7",
            data_plane=tuple(DataPort(interface=i_, address=a, hca=h) for i_, a, h in ports),
        )
        for i, (name, ports) in enumerate(cables.items())
    ]


def test_ranks_on_a_shared_subnet_meet_on_rank0s_fabric_address(hosts: Mapping[str, Host]) -> None:
    nets = lane_network("x", [hosts["dgx1"], hosts["dgx4"]])
    assert [n.own_address for n in nets] == ["192.168.100.11", "192.168.100.14"]
    assert {n.head_address for n in nets} == {"192.168.100.11"}
    assert [n.socket_ifnames for n in nets] == [("enp1s0f0np0",), ("enp1s0f1np1",)]  # each host's own port
    assert [n.hcas for n in nets] == [("rocep1s0f0",), ("rocep1s0f1",)]
    assert {n.ib_subnet for n in nets} == {"192.168.100.0/24"}


def test_both_functions_of_one_cx7_port_on_one_subnet_give_rdma_two_devices_and_sockets_one_port() -> None:
    # sparkrun-recipes' launch-sgl-dsv41.sh: NCCL_SOCKET_IFNAME=enp1s0f0np0,
    # NCCL_IB_HCA=rocep1s0f0,roceP2p1s0f0, NCCL_IB_ADDR_RANGE the one fabric subnet.
    def spark(name: str, last: int) -> Host:
        return Host(
            name=name,
            address=f"10.0.0.{last}",
            data_plane=(
                DataPort(interface="enp1s0f0np0", address=f"192.0.2.{last}/24", hca="rocep1s0f0"),
                DataPort(interface="enP2p1s0f0np0", address=f"192.0.2.{100 + last}/24", hca="roceP2p1s0f0"),
            ),
        )

    nets = lane_network("x", [spark("a", 11), spark("b", 12)])
    assert [n.own_address for n in nets] == ["192.0.2.11", "192.0.2.12"]
    assert {n.head_address for n in nets} == {"192.0.2.11"}
    assert {n.socket_ifnames for n in nets} == {("enp1s0f0np0",)}
    assert {n.hcas for n in nets} == {("rocep1s0f0", "roceP2p1s0f0")}
    assert {n.ib_subnet for n in nets} == {"192.0.2.0/24"}


def test_hosts_with_no_shared_subnet_are_refused_naming_both() -> None:
    a = Host(name="a", address="10.0.0.1", data_plane=(DataPort(interface="p0", address="192.168.1.1/24"),))
    b = Host(name="b", address="10.0.0.2", data_plane=(DataPort(interface="p0", address="192.168.2.1/24"),))
    with pytest.raises(InputError, match=r"a and b share no data-plane subnet") as info:
        lane_network("x", [a, b])
    assert info.value.field == "hosts"
    assert "192.168.1.1/24 on p0" in str(info.value) and "192.168.2.1/24 on p0" in str(info.value)


def test_a_host_without_data_plane_ports_is_refused() -> None:
    a = Host(name="a", address="10.0.0.1")
    b = Host(name="b", address="10.0.0.2", data_plane=(DataPort(interface="p0", address="192.168.2.1/24"),))
    with pytest.raises(InputError, match="a has no data-plane ports"):
        lane_network("x", [a, b])


def test_a_ring_uses_every_cable_for_rdma_and_the_control_network_for_sockets() -> None:
    nets = lane_network("x", _ring())
    assert [n.ring for n in nets] == [True] * 3
    assert [n.own_address for n in nets] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert {n.head_address for n in nets} == {"10.0.0.1"}
    assert {n.socket_ifnames for n in nets} == {("enP7s7",)}
    assert {n.hcas for n in nets} == {("r0", "r1")}
    assert {n.ib_subnet for n in nets} == {None}


def test_a_ring_needs_the_control_interface_of_every_host() -> None:
    ring = _ring()
    ring[1] = ring[1].model_copy(update={"control_interface": None})
    with pytest.raises(InputError, match=r"set control_interface .* for b$"):
        lane_network("x", ring)


def test_a_four_host_line_is_refused_at_the_pair_that_has_no_cable() -> None:
    line = [
        Host(name=f"h{i}", address=f"10.0.0.{i}", data_plane=tuple(
            DataPort(interface=f"p{j}", address=f"192.168.{j}.{i}/24") for j in (i - 1, i) if 0 < j < 4
        ))
        for i in range(1, 5)
    ]  # fmt: skip
    with pytest.raises(InputError, match="h1 and h3 share no data-plane subnet"):
        lane_network("x", line)


def test_the_port_block_derives_from_the_api_port_and_is_refused_past_65535(make_lane: LaneFactory) -> None:
    ports = LanePorts.of(make_lane(port=8000))
    assert (ports.dist, ports.ray.gcs, ports.ray.min_worker, ports.ray.max_worker) == (28000, 29000, 29100, 29199)
    with pytest.raises(InputError, match="choose a port up to 44336") as info:
        LanePorts.of(make_lane(port=44337))
    assert info.value.field == "port"
    assert LanePorts.of(make_lane(port=60000, hosts=["dgx1"], tp=1)).api == 60000  # one rank binds the API only


def test_what_each_rank_listens_on(make_lane: LaneFactory) -> None:
    sglang = make_lane(engine="sglang", port=8100)
    assert listening(sglang, 0) == {"api": (8100, 8100), "dist": (28100, 28100)}
    assert listening(sglang, 1) == {"api": (8100, 8100)}
    dp = make_lane(engine="sglang", port=8100, args=["--enable-dp-attention"])
    assert listening(dp, 0)["dist"] == (28100, 28106)  # SGLang's PortArgs: dist_init_port + 1 .. + 6
    ray = make_lane(engine="vllm", launcher="ray")
    assert listening(ray, 0)["ray"] == (29000, 29007)
    assert listening(ray, 2) == {"api": (8000, 8000), "ray": (29001, 29007), "ray-workers": (29100, 29199)}


def test_every_rank_renders_its_port_block(make_lane: LaneFactory, render: Renderer) -> None:
    head, worker, *_ = render(make_lane(engine="vllm", launcher="ray", ep=4))
    assert "--port=29000" in head.command and "--ray-client-server-port=29003" in head.command
    assert worker.command[worker.command.index("--address") + 1] == "192.168.100.11:29000"
    assert "--min-worker-port=29100" in worker.command and "--port=29000" not in worker.command
    native = render(make_lane(engine="vllm", launcher="native", ep=4))
    assert native[2].command[native[2].command.index("--master-port") + 1] == "28000"


@pytest.mark.parametrize(
    ("engine", "tp", "pp", "ep", "says"),
    [
        ("vllm", 4, 1, 2, "would run EP 4; set ep to 4"),
        ("vllm", 1, 4, 4, "would run no expert parallelism at all"),
        ("sglang", 4, 1, 3, "ep 3 does not divide tp 4"),
        ("flare", 4, 1, 2, "would run without expert parallelism"),
        ("generic", 4, 1, 4, "cannot pass ep 4"),
    ],
)
def test_an_ep_the_engine_would_not_honour_is_refused(
    make_lane: LaneFactory, render: Renderer, engine: str, tp: int, pp: int, ep: int, says: str
) -> None:
    with pytest.raises(InputError, match=says) as info:
        render(make_lane(engine=engine, tp=tp, pp=pp, ep=ep))
    assert info.value.field == "ep"


def test_an_ep_the_engine_honours_renders(make_lane: LaneFactory, render: Renderer) -> None:
    assert "--enable-expert-parallel" in render(make_lane(engine="vllm", ep=4))[0].command
    sglang = render(make_lane(engine="sglang", ep=2))[0].command
    assert sglang[sglang.index("--ep-size") + 1] == "2"


def test_rootless_adds_rdma_devices_ulimits_and_ipc_lock_only_where_the_host_has_rdma(
    make_lane: LaneFactory, model: ModelSpec, hosts: Mapping[str, Host]
) -> None:
    fleet = FleetDefaults(container=ContainerContract(mode="rootless", memory_limit=None))
    no_rdma = {name: h.model_copy(update={"data_plane": tuple(p.model_copy(update={"hca": None})
                                                                 for p in h.data_plane)})
               for name, h in hosts.items()}  # fmt: skip
    with_rdma = render_lane(make_lane(), model, fleet, hosts, "c" * 40)[0]
    without = render_lane(make_lane(), model, fleet, no_rdma, "c" * 40)[0]
    single = render_lane(make_lane(hosts=["dgx1"], tp=1, ep=1), model, fleet, hosts, "c" * 40)[0]
    assert (with_rdma.privileged, with_rdma.devices, with_rdma.cap_add) == (False, ("/dev/infiniband",), ("IPC_LOCK",))
    assert with_rdma.ulimits == ("memlock=-1:-1", "stack=67108864")
    assert with_rdma.security_opt == ("no-new-privileges",)
    assert (without.devices, without.env_map["NCCL_IB_DISABLE"]) == ((), "1")
    assert "NCCL_IB_HCA" not in without.env_map
    assert single.devices == ()  # one rank talks to no peer
    assert with_rdma.memory is None and with_rdma.spec_hash != without.spec_hash
