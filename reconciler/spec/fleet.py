"""Fleet-wide defaults (`state/fleet.yaml`) and hosts (`state/hosts/<host>.yaml`).

Defaults live in one place so a host file only says what is special about
that host; the effective SSH settings are resolved here, once.

A Spark has two networks. The **control plane** is `Host.address`, where the
control node reaches it over SSH, and nothing else. The **data plane** is
its ConnectX-7 ports (`Host.data_plane`): ranks rendezvous there and NCCL,
GLOO, UCX and Ray bind there. How the hosts are cabled (one switch, a direct
pair, a ring of three with one subnet per cable, as NVIDIA's connect-two-
and connect-three-sparks playbooks set them up) follows from the ports'
subnets, so it is never declared twice (`reconciler.engines.fabric`).

The fleet file also names the origins: SSH hosts that hold checkpoints (a NAS) for models whose
`origin:` points at them (`reconciler.spec.origin`). lanes copies model files from them and does
nothing else there.
"""

from __future__ import annotations

import functools
import ipaddress
from typing import Literal

from pydantic import Field, field_validator

from reconciler.spec.base import AbsPath, HostAddress, Name, StrictModel
from reconciler.spec.gateway import Gateway

IFNAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$"
"""A Linux interface name: at most 15 bytes (IFNAMSIZ 16 with the NUL), no '/', ':' or spaces."""


class DataPort(StrictModel):
    """One data-plane port of a host: a ConnectX-7 interface, its address, its RoCE device."""

    interface: str = Field(pattern=IFNAME_PATTERN, description="the netdev, e.g. enp1s0f0np0 (see `ibdev2netdev`)")
    address: str = Field(description="IPv4 address with prefix on that interface, e.g. 192.168.100.11/24")
    hca: str | None = Field(
        default=None,
        pattern=IFNAME_PATTERN,
        description="the RoCE device behind the interface, e.g. rocep1s0f0; unset: no RDMA (NCCL uses sockets)",
    )

    @field_validator("address")
    @classmethod
    def _ipv4_with_prefix(cls, value: str) -> str:
        if "/" not in value:
            raise ValueError(f"{value!r} has no prefix length; write it as the interface has it, e.g. {value}/24")
        try:
            iface = _parsed(value)  # the parse rendering reads again (`ip`, `subnet`): made once
        except ValueError as exc:
            raise ValueError(f"{value!r} is not an IPv4 address with a prefix length ({exc})") from None
        edges = (iface.network.network_address, iface.network.broadcast_address)
        if iface.ip in edges and iface.network.prefixlen < 31:
            raise ValueError(f"{value!r} is the network or broadcast address of {iface.network}")
        return value

    @property
    def ip(self) -> str:
        return _interface(self.address)[0]

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        return _interface(self.address)[1]


@functools.lru_cache(maxsize=8192)
def _parsed(address: str) -> ipaddress.IPv4Interface:
    """A port's address parsed once, by its validator, for rendering too (`lanes check` at 1,000 lanes parsed
    each port's address three times: ipaddress is pure Python, about 10 us a parse). A ValueError is not
    kept: a bad address is parsed again, and refused again, each time it is read."""
    return ipaddress.IPv4Interface(address)


@functools.lru_cache(maxsize=8192)
def _interface(address: str) -> tuple[str, ipaddress.IPv4Network]:
    """A port's address and subnet, parsed once per address: rendering asks them for every rank of every
    lane on every port of its hosts (5,400 parses for 1,000 lanes, a third of rendering them)."""
    iface = _parsed(address)
    return str(iface.ip), iface.network


class Fabric(StrictModel):
    """What every data-plane port of the fleet should show (checked against each host's facts)."""

    mtu: int | None = Field(default=None, ge=576, le=9216, description="expected MTU of data-plane links, e.g. 9000")


class ContainerContract(StrictModel):
    """How every rank's container runs, as Spark users run them (values and sources in `engines/contract.py`)."""

    mode: Literal["privileged", "rootless"] = Field(
        default="privileged",
        description="privileged (eugr's launch-cluster.sh, sparkrun's default) or rootless: RDMA devices, "
        "IPC_LOCK, memlock and stack ulimits instead of --privileged (sparkrun-recipes' launcher)",
    )
    ulimits: tuple[str, ...] = Field(
        default=("memlock=-1:-1", "stack=67108864"),
        description="--ulimit flags of every rank (privileged does not lift them): unlimited locked memory "
        "for RDMA, a 64 MiB stack",
    )
    memory_limit: str | None = Field(
        default="112g",
        pattern=r"^[0-9]+[bkmg]?$",
        description="--memory and --memory-swap: below the host's memory, so the container dies before the host",
    )
    oom_score_adj: int = Field(default=500, ge=-1000, le=1000, description="the kernel's OOM killer takes it first")


class SSHSettings(StrictModel):
    """How to reach a host over SSH. Unset fields fall back to the fleet's."""

    user: str | None = Field(default=None, description="login user")
    port: int | None = Field(default=None, ge=1, le=65535, description="sshd port")


class OriginHost(StrictModel):
    """An SSH host that holds checkpoints (a NAS), named by a model's `origin.host`: reached with the
    reconciler's key and pinned host keys to copy model files from, never probed or reconciled."""

    name: Name
    address: HostAddress = Field(description="IP or DNS name the control node reaches over SSH")
    ssh: SSHSettings = SSHSettings()

    def ssh_user(self, fleet: FleetDefaults) -> str:
        return self.ssh.user or fleet.ssh_user

    def ssh_port(self, fleet: FleetDefaults) -> int:
        return self.ssh.port or fleet.ssh_port


class FleetDefaults(StrictModel):
    """Settings every host and lane inherits unless it says otherwise."""

    ssh_user: str = Field(default="root", description="default SSH login user")
    ssh_port: int = Field(default=22, ge=1, le=65535)
    fabric: Fabric = Fabric()
    container: ContainerContract = ContainerContract()
    hf_cache: AbsPath = Field(
        default="/root/.cache/huggingface", description="HF cache on every host, mounted into engines"
    )
    state_dir_on_host: AbsPath = Field(
        default="/var/lib/lanes", description="where lanes keeps leases and env files on hosts"
    )
    registry_mirrors: tuple[str, ...] = Field(default=(), description="registry hosts to pull through, in order")
    lease_ttl_s: int = Field(default=900, ge=30, description="a host lease expires after this unless renewed")
    origins: tuple[OriginHost, ...] = Field(
        default=(),
        description="SSH hosts that hold checkpoints (a NAS) for models' `origin.host`; never reconciled",
    )
    gateway: Gateway | None = Field(
        default=None,
        description="the gateway on the control node (reconciler.spec.gateway); unset: clients reach lanes directly",
    )

    @field_validator("origins")
    @classmethod
    def _distinct_origins(cls, origins: tuple[OriginHost, ...]) -> tuple[OriginHost, ...]:
        names = [o.name for o in origins]
        twice = sorted(n for n in set(names) if names.count(n) > 1)
        if twice:
            raise ValueError(f"an origin is named twice: {', '.join(twice)}")
        return origins

    def origin(self, name: str) -> OriginHost | None:
        return next((o for o in self.origins if o.name == name), None)


class Host(StrictModel):
    """One Spark."""

    name: Name
    address: HostAddress = Field(description="IP or DNS name the control node reaches over SSH")
    ssh: SSHSettings = SSHSettings()
    hardware: str = Field(default="gb10", description="a profile name in policies/hardware.yaml")
    data_plane: tuple[DataPort, ...] = Field(
        default=(), description="the ConnectX-7 ports multi-node lanes use; the SSH address is only for control"
    )
    control_interface: str | None = Field(
        default=None,
        pattern=IFNAME_PATTERN,
        description="the netdev that carries `address` (a Spark's 10GbE port is enP7s7); needed only by lanes on "
        "a ring, whose sockets cannot use the data plane (no subnet every rank shares)",
    )
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("data_plane")
    @classmethod
    def _distinct_ports(cls, ports: tuple[DataPort, ...]) -> tuple[DataPort, ...]:
        names = [p.interface for p in ports]
        if len(set(names)) != len(names):
            twice = sorted(n for n in set(names) if names.count(n) > 1)
            raise ValueError(f"an interface is listed twice: {', '.join(twice)}")
        return ports

    def ssh_user(self, fleet: FleetDefaults) -> str:
        return self.ssh.user or fleet.ssh_user

    def ssh_port(self, fleet: FleetDefaults) -> int:
        return self.ssh.port or fleet.ssh_port
