"""The host facts a simulated Spark answers: a GB10 on DGX OS with a ConnectX-7, as recorded on real ones.

`SimSparkInfo` produces the `host` section of the probe's JSON exactly as the probe program
(`reconciler.facts.probe_host_script`) would print it on a DGX Spark, from state a test can change
per host: a link taken down, another MTU, an address removed, a GID gone, no RDMA at all, nvidia-smi
missing. The data-plane ports (interface, address, HCA) come from the host's entry in the fleet
state (`set_data_plane`, called by `reconciler.sim.hostfacts.apply_state`), so by default the
simulator agrees with the fleet file, and a test makes them disagree by changing one side.

The values and their sources:

- /etc/os-release, /etc/dgx-release, uname -r, nvidia-smi: a DGX Spark's own outputs as published
  in a public hardware inventory (dgxspark03, 2026-06-18: Ubuntu 24.04.4 LTS, kernel 6.17.0-1021-nvidia,
  aarch64, driver 580.159.03, "CUDA Version: 13.0", DGX_SWBUILD_VERSION 7.2.3 then DGX_OTA_VERSION 7.5.0);
  ObrienlabsDev/blog nvidia.md shows the same nvidia-smi layout for 580.95.05 ("Not Supported" memory);
- the ConnectX-7: four netdevs and four RoCE HCAs, one pair per QSFP port, named as `ibdev2netdev`
  prints them in NVIDIA's connect-two-sparks playbook (rocep1s0f1 port 1 ==> enp1s0f1np1, ...);
  port state "4: ACTIVE"/"1: DOWN" and GIDs as /sys/class/infiniband prints them, the IPv4 RoCE v2
  GID at index 3 (playbook perftest: "GID index : 3"; sparkrun's ib_detect.sh defaults to 3 too)
  with the RoCE v1 GID of the same address at 2; a cabled port at 200000 Mb/s;
- MTU 9000: what sparkrun's `setup cx7` configures (orchestration/networking.py DEFAULT_MTU). NVIDIA's
  playbooks leave the CX-7 at 1500 (their `ip addr` examples), so a fleet expecting jumbo frames
  has to say so (`fabric.mtu`); a test sets 1500 to see the rule refuse it;
- /dev/infiniband: issm, umad and uverbs per HCA and rdma_cm, what the rdma-core udev rules create.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

CX7_PORTS = (
    # (netdev, HCA): one pair per PCIe function of the ConnectX-7; p0 is the QSFP port next to the
    # Ethernet jack, p1 the other (connect-three-sparks), each seen through two PCIe x4 links.
    ("enp1s0f0np0", "rocep1s0f0"),
    ("enp1s0f1np1", "rocep1s0f1"),
    ("enP2p1s0f0np0", "roceP2p1s0f0"),
    ("enP2p1s0f1np1", "roceP2p1s0f1"),
)
CABLED = ("enp1s0f1np1", "enP2p1s0f1np1")  # one QSFP cable in port p1: both of its netdevs are up
CONTROL = "enP7s7"  # the 10GbE RJ-45 port (NVIDIA's spark_cluster_setup binds NCCL sockets there on a ring)
CX7_SPEED_MBPS = 200_000
JUMBO_MTU = 9000
ACTIVE = "4: ACTIVE"
DOWN = "1: DOWN"

OS_RELEASE = """PRETTY_NAME="Ubuntu 24.04.4 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
VERSION="24.04.4 LTS (Noble Numbat)"
VERSION_CODENAME=noble
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
SUPPORT_URL="https://help.ubuntu.com/"
BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"
PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"
UBUNTU_CODENAME=noble
LOGO=ubuntu-logo
"""

DGX_RELEASE = """DGX_NAME="DGX Spark"
DGX_PRETTY_NAME="NVIDIA DGX Spark"
DGX_SWBUILD_DATE="2025-09-10-13-50-03"
DGX_SWBUILD_VERSION="7.2.3"
DGX_COMMIT_ID="833b4a7"
DGX_PLATFORM="DGX Server for KVM"
DGX_SERIAL_NUMBER="1983925020080"

DGX_OTA_VERSION="7.5.0"
DGX_OTA_DATE="Thu Jun 18 17:40:28 EDT 2026"
"""

DRIVER = "580.159.03"

_SMI = """Thu Jun 18 19:44:21 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI {driver:<22} Driver Version: {driver:<14} CUDA Version: {cuda:<9}|
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA GB10                    On  |   0000000F:01:00.0 Off |                  N/A |
| N/A   33C    P8              4W /  N/A  | Not Supported          |      0%      Default |
|                                         |                        |                  N/A |
+-----------------------------------------+------------------------+----------------------+
"""


@dataclass
class SimLink:
    """One network interface of a simulated Spark (what rtnetlink and ethtool would say)."""

    name: str
    operstate: str = "down"
    mtu: int = 1500
    speed_mbps: int | None = None
    ipv4: list[str] = field(default_factory=list)  # "a.b.c.d/prefix"

    def cable(self, mtu: int = JUMBO_MTU) -> None:
        """A QSFP cable with a live peer: the link is up at the port's speed."""
        self.operstate, self.mtu, self.speed_mbps = "up", mtu, CX7_SPEED_MBPS

    def unplug(self) -> None:
        """No carrier: the kernel says down and reports no speed; addresses stay configured."""
        self.operstate, self.speed_mbps = "down", None


@dataclass
class SimHca:
    """One RoCE HCA: its netdev and port 1; its IPv4 GIDs follow the netdev's addresses."""

    name: str
    netdevs: list[str]
    roce_v2: bool = True  # False: the v2 GIDs are missing (what a host where NCCL cannot connect shows)
    gids_before: int = 0
    """GIDs ahead of the IPv4-mapped pairs besides the link-local pair (another IPv6 address, say): they move
    every index up, which is why the index of a port's RoCE v2 GID is 3 on some Sparks of a fleet and 4 on
    others (sparkrun-recipes' launch-sgl-dsv41.sh probes it per node for that reason)."""

    def port_state(self, links: dict[str, SimLink]) -> str:
        backing = [links[n] for n in self.netdevs if n in links]
        return ACTIVE if backing and all(lk.operstate == "up" for lk in backing) else DOWN

    def gids(self, links: dict[str, SimLink]) -> list[dict[str, Any]]:
        """The IPv4-mapped GIDs the probe reports: per address, RoCE v1 then v2, from index 2 (0 and 1
        are the IPv6 link-local pair the probe does not send)."""
        out: list[dict[str, Any]] = []
        index = 2 + self.gids_before
        for name in self.netdevs[:1]:
            for address in links[name].ipv4 if name in links else ():
                packed = ipaddress.IPv4Interface(address).ip.packed.hex()
                gid = "0000:0000:0000:0000:0000:ffff:" + packed[:4] + ":" + packed[4:]
                out.append({"index": index, "gid": gid, "type": "IB/RoCE v1"})
                if self.roce_v2:
                    out.append({"index": index + 1, "gid": gid, "type": "RoCE v2"})
                index += 2
        return out


@dataclass
class SimSparkInfo:
    """The host facts of one simulated Spark; a field set to None is a fact the probe could not read."""

    os_release: str | None = OS_RELEASE
    dgx_release: str | None = DGX_RELEASE
    kernel: str = "6.17.0-1021-nvidia"
    arch: str = "aarch64"
    driver: str | None = DRIVER  # None: the nvidia module is not loaded
    cuda: str = "13.0"
    nvidia_smi: bool = True  # False: no nvidia-smi on the PATH
    gpu_processes: list[int] = field(default_factory=list)
    links: dict[str, SimLink] = field(default_factory=dict)
    rdma: dict[str, SimHca] | None = field(default_factory=dict)  # None: /sys/class/infiniband unreadable
    dev_infiniband: list[str] | None = None  # None: derived from the HCAs

    @classmethod
    def gb10(cls) -> SimSparkInfo:
        """A Spark with one QSFP cable in port p1 and nothing configured on it yet."""
        info = cls(links={"lo": SimLink("lo", "unknown", 65536, None, ["127.0.0.1/8"])})
        # The control port is up; its address is not simulated (the simulator is reached on a loopback
        # address of its own, and the fleet file does not say the control subnet's prefix).
        info.links[CONTROL] = SimLink(CONTROL, "up", 1500, 10_000)
        for netdev, hca in CX7_PORTS:
            info.links[netdev] = SimLink(netdev)
            if netdev in CABLED:
                info.links[netdev].cable()
            assert info.rdma is not None
            info.rdma[hca] = SimHca(hca, [netdev])
        return info

    def set_data_plane(self, ports: Sequence[tuple[str, str, str | None]]) -> None:
        """The host's data-plane ports from the fleet state, (interface, "a.b.c.d/prefix", HCA or None):
        the cables are where the state says, each named interface up at jumbo MTU with that address and a
        named HCA backed by it; the CX-7 netdevs it does not name have no cable."""
        if ports:
            for netdev, _hca in CX7_PORTS:
                if netdev in self.links:
                    self.links[netdev].unplug()
        for interface, address, hca in ports:
            link = self.links.setdefault(interface, SimLink(interface))
            link.cable()
            link.ipv4 = [address]
            if hca is not None:
                if self.rdma is None:
                    self.rdma = {}
                self.rdma[hca] = SimHca(hca, [interface])

    def section(self, disks: dict[str, dict[str, Any]], errors: list[str]) -> dict[str, Any]:
        """The probe's `host` object, with the errors the real probe would add for what is missing."""
        driver = None
        if self.driver is None:
            errors.append("nvidia driver: not loaded (no /sys/module/nvidia/version, no /proc/driver/nvidia/version)")
        else:
            driver = {"path": "/sys/module/nvidia/version", "text": self.driver + "\n"}
        smi = apps = None
        if not self.nvidia_smi:
            errors.append("nvidia-smi: not found")
        else:
            table = _SMI.format(driver=self.driver or "N/A", cuda=self.cuda)
            smi = "".join(line for line in table.splitlines(keepends=True) if "CUDA Version" in line)  # as sent
            apps = "".join(f"{pid}\n" for pid in self.gpu_processes)
        if self.rdma is None:
            errors.append("/sys/class/infiniband: Permission denied")
        rdma = None
        if self.rdma is not None:
            rdma = [
                {
                    "name": h.name,
                    "netdevs": sorted(h.netdevs),
                    "port_state": h.port_state(self.links),
                    "gids": h.gids(self.links),
                }
                for h in sorted(self.rdma.values(), key=lambda h: h.name)
            ]
        return {
            "os_release": self.os_release,
            "dgx_release": self.dgx_release,
            "uname": {"release": self.kernel, "machine": self.arch},
            "nvidia_version": driver,
            "nvidia_smi": smi,
            "compute_apps": apps,
            "links": [
                {"name": lk.name, "operstate": lk.operstate, "mtu": lk.mtu, "speed": lk.speed_mbps, "ipv4": lk.ipv4}
                for lk in self.links.values()
            ],
            "rdma": rdma,
            "dev_infiniband": self._dev_infiniband(),
            "disks": disks,
        }

    def device_paths(self) -> set[str]:
        """The device paths `docker run --device` finds here: /dev/infiniband and what is in it, if anything."""
        devices = self._dev_infiniband()
        return {"/dev/infiniband", *(f"/dev/infiniband/{d}" for d in devices)} if devices else set()

    def _dev_infiniband(self) -> list[str]:
        if self.dev_infiniband is not None:
            return sorted(self.dev_infiniband)
        if self.rdma is not None and not self.rdma:
            return []
        # One set per HCA; when sysfs cannot be read the devices are still there (the ConnectX-7's four).
        n = len(self.rdma) if self.rdma is not None else len(CX7_PORTS)
        return sorted(["rdma_cm", *(f"{kind}{i}" for kind in ("issm", "umad", "uverbs") for i in range(n))])
