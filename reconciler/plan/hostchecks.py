"""Why a multi-node lane cannot run on its rank hosts now, from the host facts of this cycle's probe.

Pure: the lane's hosts as the fleet state describes them, and what each host's probe read
(`ObservedHost.info`). Only multi-node lanes are checked: their ranks meet on the data plane, a
single-node lane never touches it. A fact the probe could not read (`None`) never blocks: it is
named in `lanes hosts` instead. Each reason names the host, the interface or RoCE device and the
figures, so a person can go and look:

- the port's link is absent or not up: NCCL and GLOO bind that interface (`engines/fabric.py`);
- the port does not carry the address the state gives it: ranks rendezvous on that address;
- its MTU is below the fleet's `fabric.mtu`;
- the RoCE device named for the port is absent, its port 1 not ACTIVE, not backed by that
  interface (the mapping `ibdev2netdev` prints: `device/net/*` in sysfs), or without a RoCE v2 GID
  for the port's IPv4 address: NCCL picks the GID carrying the address (sparkrun-recipes'
  launch-sgl-dsv41.sh probes it per node), and with none every RDMA connect fails;
- no /dev/infiniband/uverbs* while the lane's ports name RoCE devices: a container cannot open them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reconciler.facts.hostinfo import HostInfo
from reconciler.facts.observed import ObservedHost
from reconciler.spec import DataPort, Host

__all__ = ["HostProblem", "host_problems", "lane_ports"]


@dataclass(frozen=True)
class HostProblem:
    """One reason a lane cannot run on one of its hosts now."""

    host: str
    message: str  # names the interface or RoCE device and the figures

    def __str__(self) -> str:
        return f"{self.host}: {self.message}"


def lane_ports(host: Host, others: Sequence[Host]) -> tuple[DataPort, ...]:
    """The data-plane ports of `host` a lane over `host` and `others` uses, as `engines.fabric` picks them:
    the ports on the subnets every rank shares, or, when none is shared by all (a ring), every port
    facing one of the other ranks. A lane whose ranks share no subnet at all is denied by policy."""
    common = [p.subnet for p in host.data_plane if all(any(q.subnet == p.subnet for q in o.data_plane) for o in others)]
    if common:
        return tuple(p for p in host.data_plane if p.subnet in common)
    peers = {q.subnet for o in others for q in o.data_plane}
    return tuple(p for p in host.data_plane if p.subnet in peers)


def host_problems(
    lane_hosts: Sequence[str],
    hosts: Mapping[str, Host],
    observed: Mapping[str, ObservedHost],
    expected_mtu: int | None,
) -> tuple[HostProblem, ...]:
    """The reasons a lane over `lane_hosts` (rank order) cannot run there now; empty when nothing known stops it."""
    if len(lane_hosts) < 2:
        return ()
    out: list[HostProblem] = []
    for name in lane_hosts:
        host = hosts.get(name)
        seen = observed.get(name)
        if host is None or seen is None or seen.info is None:
            continue  # not in the state (policy says so) or not probed (the planner says so): unknown here
        others = [hosts[o] for o in lane_hosts if o != name and o in hosts]
        ports = lane_ports(host, others)
        messages = [m for port in ports for m in _port_problems(port, seen.info, expected_mtu)]
        messages += _device_nodes(ports, seen.info)
        out += [HostProblem(name, m) for m in messages]
    return tuple(out)


def _port_problems(port: DataPort, info: HostInfo, expected_mtu: int | None) -> list[str]:
    out: list[str] = []
    if info.links is not None:
        link = info.link(port.interface)
        if link is None:
            have = ", ".join(lk.name for lk in info.links if lk.name != "lo") or "none"
            out.append(f"data-plane interface {port.interface} is absent (the host has {have})")
        else:
            if not link.up:
                out.append(f"{port.interface} is {link.operstate}, not up")
            want = ipaddress.IPv4Interface(port.address)
            if not any(_same(a, want) for a in link.ipv4):
                has = ", ".join(link.ipv4) or "no IPv4 address"
                out.append(f"{port.interface} does not carry {port.address} (it has {has})")
            if expected_mtu is not None and link.mtu is not None and link.mtu < expected_mtu:
                out.append(f"{port.interface} has MTU {link.mtu}, below the fleet's {expected_mtu}")
    if port.hca is None or info.rdma is None:
        return out
    device = info.hca(port.hca)
    if device is None:
        have = ", ".join(d.name for d in info.rdma) or "none"
        out.append(f"RoCE device {port.hca} (for {port.interface}) is absent (the host has {have})")
        return out
    if not device.active:
        out.append(f"{port.hca} port 1 is {device.port_state or 'in no state'}, not ACTIVE")
    if port.interface not in device.netdevs:
        backing = ", ".join(device.netdevs) or "no netdev"
        out.append(f"{port.hca} is backed by {backing}, not {port.interface}")
    if port.ip not in device.roce_v2_ipv4_gids:
        v2 = ", ".join(f"{ip} at {i}" for ip, i in sorted(device.roce_v2_ipv4_gids.items())) or "none"
        out.append(
            f"{port.hca} has no RoCE v2 GID for {port.ip} (its IPv4 RoCE v2 GIDs: {v2}); "
            "NCCL would fail every RDMA connect"
        )
    return out


def _device_nodes(ports: Sequence[DataPort], info: HostInfo) -> list[str]:
    hcas = [p.hca for p in ports if p.hca is not None]
    if not hcas or info.rdma_char_devices is None:
        return []
    if any(d.startswith("uverbs") for d in info.rdma_char_devices):
        return []
    found = ", ".join(info.rdma_char_devices) if info.rdma_char_devices else "absent"
    named = f"{hcas[0]} is" if len(hcas) == 1 else f"{', '.join(hcas)} are"
    return [f"/dev/infiniband has no uverbs device ({found}) while {named} named for RDMA: no container can open them"]


def _same(have: str, want: ipaddress.IPv4Interface) -> bool:
    try:
        return ipaddress.IPv4Interface(have) == want
    except ValueError:
        return False
