"""Where the ranks of a multi-node lane meet: per rank, the addresses, interfaces and RoCE devices.

The shape of the cabling is read from the ranks' data-plane subnets, never
declared beside them:

- **shared**: one subnet every rank has a port on (a switch, or a direct
  pair). Ranks rendezvous on rank 0's address there and every socket binds
  there: NVIDIA's vLLM playbook (nvidia/vllm/README.md, "Start Ray head
  node") sets VLLM_HOST_IP, NCCL/GLOO/TP_SOCKET_IFNAME and UCX_NET_DEVICES to
  the QSFP-side interface and address, and sparkrun-recipes'
  launch-sgl-dsv41.sh gives `--dist-init-addr` rank 0's fabric address.
- **ring**: every pair of ranks shares a subnet (one per cable, NVIDIA's
  connect-three-sparks netplan), but no subnet reaches them all. NCCL's
  bootstrap and GLOO each bind one interface and advertise its address to
  every peer, which a ring cannot route, so sockets go over the control
  network while NCCL's RDMA traffic takes the cables: NVIDIA's
  spark_cluster_setup.py (multi-sparks-through-switch) runs its 3-node ring
  test with NCCL_SOCKET_IFNAME on the 10GbE port enP7s7 and NCCL_IB_HCA on all
  four CX-7 devices, and sparkrun's `generate_nccl_env` does the same with
  the default-route interface. A ring therefore needs `control_interface`.

A lane whose ranks have no such path is refused here, naming the hosts, so
`lanes check` denies it before anything runs.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reconciler.errors import InputError
from reconciler.spec import DataPort, Host


@dataclass(frozen=True)
class RankNet:
    """One rank's view of its lane's network."""

    own_address: str
    """What the rank announces as itself (VLLM_HOST_IP, SGLANG_HOST_IP, `ray start --node-ip-address`)."""
    head_address: str
    """Where this rank finds rank 0 (`--master-addr`, `--dist-init-addr`, `ray start --address`)."""
    socket_ifnames: tuple[str, ...]
    """Interfaces for NCCL's bootstrap, GLOO, TensorPipe and UCX sockets."""
    hcas: tuple[str, ...]
    """RoCE devices NCCL may use (NCCL_IB_HCA); empty: no RDMA, NCCL uses sockets."""
    ib_subnet: str | None
    """The one subnet NCCL picks its RoCE GID from (NCCL_IB_ADDR_RANGE); None on a ring or several rails."""
    ring: bool


def _ports_on(host: Host, subnet: ipaddress.IPv4Network) -> list[DataPort]:
    return [p for p in host.data_plane if p.subnet == subnet]


def _describe(host: Host) -> str:
    if not host.data_plane:
        return f"{host.name}: no data-plane ports"
    return f"{host.name}: " + ", ".join(f"{p.address} on {p.interface}" for p in host.data_plane)


def lane_network(lane: str, hosts: Sequence[Host]) -> tuple[RankNet, ...]:
    """Each rank's network, in rank order; raises InputError(field='hosts') when the ranks cannot meet."""
    if len(hosts) < 2:
        return ()
    bare = [h.name for h in hosts if not h.data_plane]
    if bare:
        raise InputError(
            f"lane '{lane}': {', '.join(bare)} {'has' if len(bare) == 1 else 'have'} no data-plane ports "
            "(data_plane in the host file), and a multi-node lane's ranks meet only there",
            field="hosts",
        )
    # Each subnet once: a host may have several ports on one subnet (both PCIe functions of a Spark's CX-7
    # port, as sparkrun-recipes' launcher lists rocep1s0f0 and roceP2p1s0f0 on one fabric).
    common = list(
        dict.fromkeys(p.subnet for p in hosts[0].data_plane if all(_ports_on(h, p.subnet) for h in hosts[1:]))
    )
    if common:
        return tuple(_shared(h, hosts[0], common) for h in hosts)
    for i, a in enumerate(hosts):
        for b in hosts[i + 1 :]:
            if not {p.subnet for p in a.data_plane} & {p.subnet for p in b.data_plane}:
                raise InputError(
                    f"lane '{lane}': {a.name} and {b.name} share no data-plane subnet, so their ranks cannot "
                    f"reach each other ({_describe(a)}; {_describe(b)})",
                    field="hosts",
                )
    return _ring(lane, hosts)


def _shared(host: Host, head: Host, subnets: list[ipaddress.IPv4Network]) -> RankNet:
    first = _ports_on(host, subnets[0])[0]
    rails = [p for subnet in subnets for p in _ports_on(host, subnet)]
    hcas = tuple(p.hca for p in rails if p.hca is not None)
    return RankNet(
        own_address=first.ip,
        head_address=_ports_on(head, subnets[0])[0].ip,
        socket_ifnames=(first.interface,),
        # RDMA only when every rail has a device: NCCL pairs devices across ranks rail by rail.
        hcas=hcas if len(hcas) == len(rails) else (),
        ib_subnet=str(subnets[0]) if len(subnets) == 1 else None,
        ring=False,
    )


def _ring(lane: str, hosts: Sequence[Host]) -> tuple[RankNet, ...]:
    missing = [h.name for h in hosts if h.control_interface is None]
    if missing:
        raise InputError(
            f"lane '{lane}': its hosts are cabled as a ring (no data-plane subnet reaches every rank), so "
            "NCCL's bootstrap and GLOO must use the control network; set control_interface (the netdev of "
            f"the SSH address, enP7s7 on a Spark) for {', '.join(missing)}",
            field="hosts",
        )
    out = []
    for host in hosts:
        peers = {p.subnet for other in hosts if other is not host for p in other.data_plane}
        facing = [p for p in host.data_plane if p.subnet in peers]
        hcas = tuple(p.hca for p in facing if p.hca is not None)
        assert host.control_interface is not None
        out.append(
            RankNet(
                own_address=host.address,
                head_address=hosts[0].address,
                socket_ifnames=(host.control_interface,),
                hcas=hcas if len(hcas) == len(facing) else (),
                ib_subnet=None,
                ring=True,
            )
        )
    return tuple(out)


def hosts_of(lane_hosts: Sequence[str], hosts: Mapping[str, Host]) -> list[Host]:
    return [hosts[name] for name in lane_hosts]
