"""Host facts that stop a multi-node lane: each reason on its own, and what never blocks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconciler.facts.hostinfo import HostInfo, NetLink, RdmaDevice
from reconciler.facts.observed import ModelPresence, ObservedHost
from reconciler.plan.hostchecks import host_problems, lane_ports
from reconciler.spec import Host
from reconciler.spec.load import DesiredState
from tests.support.example import PRODUCTION, example_state

pytestmark = pytest.mark.timeout(30)

DESIRED = example_state()
PROD_HOSTS = DESIRED.lanes[PRODUCTION].hosts  # dgx1-4: enp1s0f0np0 / rocep1s0f0 (and roceP2p1s0f0) on 192.168.100.0/24


def healthy(host: Host) -> HostInfo:
    """What a host whose data plane is as its file says reports: links up at 9000, RoCE v2 GID 3 per address."""
    links = [NetLink("lo", "unknown", 65536, None, ("127.0.0.1/8",))]
    rdma = []
    for port in host.data_plane:
        links.append(NetLink(port.interface, "up", 9000, 200_000, (port.address,)))
        if port.hca:
            rdma.append(RdmaDevice(port.hca, (port.interface,), "4: ACTIVE", {port.ip: 3}))
    chars = ("issm0", "rdma_cm", "umad0", "uverbs0")
    return HostInfo(kernel="6.17.0-1021-nvidia", links=tuple(links), rdma=tuple(rdma), rdma_char_devices=chars)


def observed(desired: DesiredState, **infos: HostInfo | None) -> dict[str, ObservedHost]:
    out = {}
    for name, host in desired.hosts.items():
        info = infos[name] if name in infos else healthy(host)
        models = {m.path: ModelPresence(True, 1 << 30) for m in desired.models.values()}
        out[name] = ObservedHost(name, True, None, (), (), frozenset(), None, None, None, models, None, (), info=info)
    return out


def _link(info: HostInfo, name: str, **change: object) -> HostInfo:
    links = tuple(replace(lk, **change) if lk.name == name else lk for lk in info.links or ())  # type: ignore[arg-type]
    return replace(info, links=links)


def _hca(info: HostInfo, name: str, **change: object) -> HostInfo:
    rdma = tuple(replace(d, **change) if d.name == name else d for d in info.rdma or ())  # type: ignore[arg-type]
    return replace(info, rdma=rdma)


DGX2 = healthy(DESIRED.hosts["dgx2"])
BROKEN: dict[str, tuple[HostInfo, str]] = {
    "link absent": (
        replace(DGX2, links=tuple(lk for lk in DGX2.links or () if lk.name != "enp1s0f0np0")),
        "dgx2: data-plane interface enp1s0f0np0 is absent (the host has enP2p1s0f0np0)",
    ),
    "link down": (_link(DGX2, "enp1s0f0np0", operstate="down"), "dgx2: enp1s0f0np0 is down, not up"),
    "other address": (
        _link(DGX2, "enp1s0f0np0", ipv4=("192.168.100.99/24",)),
        "dgx2: enp1s0f0np0 does not carry 192.168.100.12/24 (it has 192.168.100.99/24)",
    ),
    "other prefix": (
        _link(DGX2, "enp1s0f0np0", ipv4=("192.168.100.12/16",)),
        "dgx2: enp1s0f0np0 does not carry 192.168.100.12/24 (it has 192.168.100.12/16)",
    ),
    "no address": (
        _link(DGX2, "enp1s0f0np0", ipv4=()),
        "dgx2: enp1s0f0np0 does not carry 192.168.100.12/24 (it has no IPv4 address)",
    ),
    "small MTU": (_link(DGX2, "enp1s0f0np0", mtu=1500), "dgx2: enp1s0f0np0 has MTU 1500, below the fleet's 9000"),
    "HCA absent": (
        replace(DGX2, rdma=tuple(d for d in DGX2.rdma or () if d.name != "rocep1s0f0")),
        "dgx2: RoCE device rocep1s0f0 (for enp1s0f0np0) is absent (the host has roceP2p1s0f0)",
    ),
    "HCA down": (_hca(DGX2, "rocep1s0f0", port_state="1: DOWN"), "dgx2: rocep1s0f0 port 1 is 1: DOWN, not ACTIVE"),
    "HCA on another netdev": (
        _hca(DGX2, "rocep1s0f0", netdevs=("enp1s0f1np1",)),
        "dgx2: rocep1s0f0 is backed by enp1s0f1np1, not enp1s0f0np0",
    ),
    "no RoCE v2 GID": (
        _hca(DGX2, "rocep1s0f0", roce_v2_ipv4_gids={"10.0.0.2": 3}),
        "dgx2: rocep1s0f0 has no RoCE v2 GID for 192.168.100.12 (its IPv4 RoCE v2 GIDs: 10.0.0.2 at 3); "
        "NCCL would fail every RDMA connect",
    ),
    "no uverbs": (
        replace(DGX2, rdma_char_devices=()),
        "dgx2: /dev/infiniband has no uverbs device (absent) while rocep1s0f0, roceP2p1s0f0 are named for RDMA: "
        "no container can open them",
    ),
}


def _problems(**infos: HostInfo | None) -> tuple[str, ...]:
    found = host_problems(PROD_HOSTS, DESIRED.hosts, observed(DESIRED, **infos), DESIRED.fleet.fabric.mtu)
    return tuple(str(p) for p in found)


def test_hosts_as_the_fleet_file_says_stop_nothing() -> None:
    assert DESIRED.fleet.fabric.mtu == 9000
    assert _problems() == ()


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_each_fact_that_stops_a_multi_node_lane(case: str) -> None:
    info, reason = BROKEN[case]
    assert _problems(dgx2=info) == (reason,)


def test_unknown_facts_never_stop_a_lane() -> None:
    unknown = replace(DGX2, links=None, rdma=None, rdma_char_devices=None)
    assert _problems(dgx2=unknown, dgx3=None) == ()


def test_single_node_lanes_do_not_need_the_data_plane() -> None:
    down = _link(DGX2, "enp1s0f0np0", operstate="down")
    assert host_problems(("dgx2",), DESIRED.hosts, observed(DESIRED, dgx2=down), 9000) == ()


def test_no_expected_mtu_checks_no_mtu() -> None:
    small = _link(DGX2, "enp1s0f0np0", mtu=1500)
    assert host_problems(PROD_HOSTS, DESIRED.hosts, observed(DESIRED, dgx2=small), None) == ()


def _host(name: str, *ports: tuple[str, str, str | None]) -> Host:
    data = [{"interface": i, "address": a, "hca": h} for i, a, h in ports]
    return Host.model_validate({"name": name, "address": f"10.0.0.{len(name)}", "data_plane": data})


def test_only_the_ports_the_lane_uses_are_checked() -> None:
    a = _host("a", ("enp1s0f0np0", "192.168.100.1/24", "rocep1s0f0"), ("enp1s0f1np1", "10.9.0.1/24", None))
    b = _host("b", ("enp1s0f0np0", "192.168.100.2/24", "rocep1s0f0"))
    assert [p.interface for p in lane_ports(a, [b])] == ["enp1s0f0np0"]
    # A ring of three (connect-three-sparks): no subnet reaches all, each port faces one peer.
    r1 = _host("r1", ("p0", "192.168.0.1/24", None), ("p1", "192.168.2.1/24", None), ("x", "10.1.1.1/24", None))
    r2 = _host("r2", ("p0", "192.168.1.1/24", None), ("p1", "192.168.0.2/24", None))
    r3 = _host("r3", ("p0", "192.168.2.2/24", None), ("p1", "192.168.1.2/24", None))
    assert [p.interface for p in lane_ports(r1, [r2, r3])] == ["p0", "p1"]
    # The unused port of `a` is down and stops nothing; the used one does.
    hosts = {"a": a, "b": b}
    info_a = HostInfo(
        links=(
            NetLink("enp1s0f0np0", "up", 9000, None, ("192.168.100.1/24",)),
            NetLink("enp1s0f1np1", "down", 9000, None, ()),
        ),
        rdma=(RdmaDevice("rocep1s0f0", ("enp1s0f0np0",), "4: ACTIVE", {"192.168.100.1": 3}),),
        rdma_char_devices=("uverbs0",),
    )
    seen = {
        n: ObservedHost(
            n, True, None, (), (), frozenset(), None, None, None, {}, None, (), info=info_a if n == "a" else None
        )
        for n in hosts
    }
    assert host_problems(("a", "b"), hosts, seen, 9000) == ()
