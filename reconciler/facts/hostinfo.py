"""What a Spark operator checks by hand before trusting a host with a rank, as typed values.

The probe (`probe_host_script`) sends raw texts and sysfs values; the pure functions here turn
them into a `HostInfo`: OS and DGX OS release, kernel, machine, NVIDIA driver and the CUDA version
it supports, GPU compute processes, network links with their IPv4 addresses, RDMA devices with
their RoCE v2 GIDs, the /dev/infiniband entries, and disk space under model and HF paths.

Every fact is `None` when the host could not read it (the reason is in the probe's errors); a
fact that was read and is empty is an empty tuple. Rules treat `None` as unknown and never block
on it (`reconciler.plan.hostchecks`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DgxRelease",
    "DiskSpace",
    "HostInfo",
    "HostInfoShapeError",
    "NetLink",
    "RdmaDevice",
    "gid_ipv4",
    "parse_compute_apps",
    "parse_dgx_release",
    "parse_disks",
    "parse_driver_version",
    "parse_host_info",
    "parse_nvidia_smi_header",
    "parse_os_release",
]


class HostInfoShapeError(ValueError):
    """The probe's host section has a field of the wrong type (the probe and parser disagree)."""


@dataclass(frozen=True, slots=True)
class NetLink:
    """One network interface as the kernel of the probe's network namespace sees it."""

    name: str
    operstate: str  # the kernel's RFC 2863 state, as /sys/class/net/<if>/operstate spells it: up, down, ...
    mtu: int | None
    speed_mbps: int | None  # None: not reported (link down, or a virtual device without a speed)
    ipv4: tuple[str, ...]  # "a.b.c.d/prefix", in the kernel's order

    @property
    def up(self) -> bool:
        return self.operstate == "up"


@dataclass(frozen=True, slots=True)
class RdmaDevice:
    """One RDMA device (a RoCE HCA of the ConnectX-7) and its port 1."""

    name: str
    netdevs: tuple[str, ...]  # the Ethernet interface(s) behind it: /sys/class/infiniband/<hca>/device/net/*
    port_state: str | None  # ports/1/state as the kernel prints it, e.g. "4: ACTIVE" or "1: DOWN"
    roce_v2_ipv4_gids: Mapping[str, int]  # IPv4 address -> index of its RoCE v2 GID

    @property
    def active(self) -> bool:
        return self.port_state is not None and self.port_state.split(":")[-1].strip() == "ACTIVE"


@dataclass(frozen=True, slots=True)
class DgxRelease:
    """/etc/dgx-release: the build the system was installed with and the newest OTA update applied.

    The file is shell assignments; each OTA update appends another DGX_OTA_VERSION/DGX_OTA_DATE
    pair, so the last one is the software level the host runs now (see `parse_dgx_release`).
    """

    name: str | None  # DGX_PRETTY_NAME, e.g. "NVIDIA DGX Spark"
    build: str | None  # DGX_SWBUILD_VERSION, e.g. "7.2.3"
    ota: str | None  # the last DGX_OTA_VERSION, e.g. "7.5.0"; None before the first update

    def describe(self) -> str:
        version = self.ota or self.build or "?"
        built = f" (installed {self.build})" if self.ota and self.build and self.build != self.ota else ""
        return f"{self.name or 'DGX OS'} {version}{built}"


@dataclass(frozen=True, slots=True)
class DiskSpace:
    """Free and total bytes of the filesystem holding a path (or its nearest existing parent)."""

    free: int
    total: int
    measured_at: str  # the path statvfs was given: the path itself, or the parent that exists


@dataclass(frozen=True, slots=True)
class HostInfo:
    """The host facts of one probe; `None` marks a fact the host could not read."""

    os_release: str | None = None  # PRETTY_NAME of /etc/os-release
    dgx_release: DgxRelease | None = None  # None also when the file is absent (not DGX OS)
    kernel: str | None = None  # uname -r
    arch: str | None = None  # uname -m
    driver_version: str | None = None  # the loaded nvidia kernel module
    cuda_version: str | None = None  # what the driver supports (nvidia-smi's header)
    gpu_processes: tuple[int, ...] | None = None  # pids of GPU compute processes
    links: tuple[NetLink, ...] | None = None
    rdma: tuple[RdmaDevice, ...] | None = None
    rdma_char_devices: tuple[str, ...] | None = None  # entries of /dev/infiniband; () when absent
    disks: Mapping[str, DiskSpace] = field(default_factory=dict)

    def link(self, name: str) -> NetLink | None:
        return next((lk for lk in self.links or () if lk.name == name), None)

    def hca(self, name: str) -> RdmaDevice | None:
        return next((d for d in self.rdma or () if d.name == name), None)


# -- the raw texts ------------------------------------------------------------------------------


def _shell_assignments(text: str) -> list[tuple[str, str]]:
    """KEY=value lines of an os-release style file, values unquoted, in file order."""
    out = []
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if not sep or not key or key.startswith("#"):
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out.append((key, value))
    return out


def parse_os_release(text: str) -> str | None:
    """PRETTY_NAME of an os-release(5) file (NAME VERSION when it has none)."""
    values = dict(_shell_assignments(text))
    pretty = values.get("PRETTY_NAME") or " ".join(v for v in (values.get("NAME"), values.get("VERSION")) if v)
    return pretty or None


def parse_dgx_release(text: str) -> DgxRelease | None:
    """/etc/dgx-release, e.g. on a DGX Spark:

        DGX_NAME="DGX Spark"
        DGX_PRETTY_NAME="NVIDIA DGX Spark"
        DGX_SWBUILD_DATE="2025-09-10-13-50-03"
        DGX_SWBUILD_VERSION="7.2.3"
        ...
        DGX_OTA_VERSION="7.3.1"
        DGX_OTA_DATE="Thu Jan 15 19:07:36 CET 2026"
        DGX_OTA_VERSION="7.4.0"
        ...

    Each OTA update appends a pair, so the last DGX_OTA_VERSION wins, as it does when the file is
    sourced by a shell (tests/facts/cases/hostinfo_*.json hold the recorded files).
    """
    values = dict(_shell_assignments(text))  # later lines override earlier ones, as `. /etc/dgx-release` would
    release = DgxRelease(
        name=values.get("DGX_PRETTY_NAME") or values.get("DGX_NAME") or None,
        build=values.get("DGX_SWBUILD_VERSION") or None,
        ota=values.get("DGX_OTA_VERSION") or None,
    )
    return release if (release.name or release.build or release.ota) else None


_NVRM = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)")
_VERSION = re.compile(r"^\d+(?:\.\d+)+$")


def parse_driver_version(path: str, text: str) -> str | None:
    """The nvidia module's version from /sys/module/nvidia/version ("580.95.05") or the first line
    of /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64
    580.173.02  Release Build ..."; older drivers: "NVIDIA UNIX aarch64 Kernel Module  550.120 ...")."""
    if path.startswith("/sys/"):
        value = text.strip()
        return value if _VERSION.match(value) else None
    match = _NVRM.search(text)
    return match.group(1) if match else None


_SMI_CUDA = re.compile(r"CUDA Version:\s*(\d+(?:\.\d+)*)")


def parse_nvidia_smi_header(text: str) -> str | None:
    """The CUDA version the driver supports, from nvidia-smi's header line:

    | NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |

    (GB10 prints "Not Supported" for its memory usage, unified memory has no framebuffer: nothing
    else of that table is read.)
    """
    match = _SMI_CUDA.search(text)
    return match.group(1) if match else None


def parse_compute_apps(text: str) -> tuple[int, ...]:
    """`nvidia-smi --query-compute-apps=pid --format=csv,noheader`: one pid a line, nothing when idle."""
    pids = []
    for line in text.splitlines():
        word = line.strip()
        if word.isdigit():
            pids.append(int(word))
    return tuple(pids)


_IPV4_MAPPED = "0000:0000:0000:0000:0000:ffff:"


def gid_ipv4(gid: str) -> str | None:
    """The IPv4 address of an IPv4-mapped GID ("0000:0000:0000:0000:0000:ffff:c0a8:640b" ->
    "192.168.100.11"), as the kernel prints /sys/class/infiniband/<hca>/ports/1/gids/<i>; None otherwise."""
    text = gid.strip().lower()
    if not text.startswith(_IPV4_MAPPED):
        return None
    tail = text[len(_IPV4_MAPPED) :].split(":")
    if len(tail) != 2 or not all(len(t) == 4 for t in tail):
        return None
    try:
        raw = bytes.fromhex(tail[0] + tail[1])
    except ValueError:
        return None
    return ".".join(str(b) for b in raw)


# -- the probe's host section -------------------------------------------------------------------


def parse_host_info(raw: object) -> HostInfo:
    """The probe's `host` object as a `HostInfo` (HostInfoShapeError on a wrong type)."""
    data = _obj(raw, "host")
    uname = _obj(data.get("uname") or {}, "host.uname")
    driver = data.get("nvidia_version")
    driver_version = None
    if driver is not None:
        drv = _obj(driver, "host.nvidia_version")
        driver_version = parse_driver_version(_str(drv.get("path"), "path"), _str(drv.get("text"), "text"))
    smi = _opt_str(data.get("nvidia_smi"), "host.nvidia_smi")
    apps = _opt_str(data.get("compute_apps"), "host.compute_apps")
    os_text = _opt_str(data.get("os_release"), "host.os_release")
    dgx_text = _opt_str(data.get("dgx_release"), "host.dgx_release")
    links = data.get("links")
    rdma = data.get("rdma")
    chars = data.get("dev_infiniband")
    return HostInfo(
        os_release=parse_os_release(os_text) if os_text is not None else None,
        dgx_release=parse_dgx_release(dgx_text) if dgx_text is not None else None,
        kernel=_opt_str(uname.get("release"), "host.uname.release"),
        arch=_opt_str(uname.get("machine"), "host.uname.machine"),
        driver_version=driver_version,
        cuda_version=parse_nvidia_smi_header(smi) if smi is not None else None,
        gpu_processes=parse_compute_apps(apps) if apps is not None else None,
        links=tuple(_link(x) for x in _list(links, "host.links")) if links is not None else None,
        rdma=tuple(_rdma(x) for x in _list(rdma, "host.rdma")) if rdma is not None else None,
        rdma_char_devices=tuple(sorted(_str(x, "dev_infiniband") for x in _list(chars, "host.dev_infiniband")))
        if chars is not None
        else None,
        disks=parse_disks(data.get("disks") or {}),
    )


def parse_disks(raw: object) -> dict[str, DiskSpace]:
    """The `disks` object of the probe's host section (sent on its own by an unchanged host)."""
    return {str(p): _disk(p, d) for p, d in _obj(raw, "host.disks").items()}


def _link(raw: object) -> NetLink:
    d = _obj(raw, "a link")
    name = _str(d.get("name"), "link name")
    return NetLink(
        name=name,
        operstate=_str(d.get("operstate"), f"link {name} operstate"),
        mtu=_opt_int(d.get("mtu"), f"link {name} mtu"),
        speed_mbps=_opt_int(d.get("speed"), f"link {name} speed"),
        ipv4=tuple(_str(a, f"link {name} ipv4") for a in _list(d.get("ipv4") or [], f"link {name} ipv4")),
    )


def _rdma(raw: object) -> RdmaDevice:
    d = _obj(raw, "an RDMA device")
    name = _str(d.get("name"), "RDMA device name")
    gids: dict[str, int] = {}
    for g in _list(d.get("gids") or [], f"{name} gids"):
        entry = _obj(g, f"{name} gid")
        address = gid_ipv4(_str(entry.get("gid"), f"{name} gid"))
        # The type file reads "RoCE v2" or "IB/RoCE v1" (ports/1/gid_attrs/types/<i>); the lowest
        # index wins, as sparkrun's ib_detect.sh takes the first RoCE v2 entry.
        if address is not None and entry.get("type") == "RoCE v2" and address not in gids:
            gids[address] = _int(entry.get("index"), f"{name} gid index")
    return RdmaDevice(
        name=name,
        netdevs=tuple(_str(n, f"{name} netdev") for n in _list(d.get("netdevs") or [], f"{name} netdevs")),
        port_state=_opt_str(d.get("port_state"), f"{name} port_state"),
        roce_v2_ipv4_gids=gids,
    )


def _disk(path: object, raw: object) -> DiskSpace:
    d = _obj(raw, f"disk {path}")
    return DiskSpace(
        free=_int(d.get("free"), f"disk {path} free"),
        total=_int(d.get("total"), f"disk {path} total"),
        measured_at=_str(d.get("measured_at") or path, f"disk {path} measured_at"),
    )


def _obj(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise HostInfoShapeError(f"{what} is not an object")
    return value


def _list(value: object, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise HostInfoShapeError(f"{what} is not a list")
    return value


def _str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise HostInfoShapeError(f"{what} is not a string: {value!r}")
    return value


def _opt_str(value: object, what: str) -> str | None:
    return None if value is None else _str(value, what)


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise HostInfoShapeError(f"{what} is not an integer: {value!r}")
    return value


def _opt_int(value: object, what: str) -> int | None:
    return None if value is None else _int(value, what)
