"""The host-fact parsers on the texts real hosts print (each quoted from where it was published)."""

from __future__ import annotations

import pytest

from reconciler.facts.hostinfo import (
    DgxRelease,
    HostInfoShapeError,
    gid_ipv4,
    parse_compute_apps,
    parse_dgx_release,
    parse_driver_version,
    parse_host_info,
    parse_nvidia_smi_header,
    parse_os_release,
)

pytestmark = pytest.mark.timeout(60)

# A DGX Spark updated over the air three times: each update appends a DGX_OTA_VERSION/DATE pair
# (the layout of a GX10's file quoted in a public DGX Spark doctor script's tests).
DGX_RELEASE_UPDATED = """DGX_NAME="DGX Spark"
DGX_PRETTY_NAME="NVIDIA DGX Spark"
DGX_SWBUILD_DATE="2025-09-10-13-50-03"
DGX_SWBUILD_VERSION="7.2.3"
DGX_COMMIT_ID="833b4a7"
DGX_PLATFORM="GX10"
DGX_SERIAL_NUMBER="XXXXXXXXXXXXXXX"

DGX_OTA_VERSION="7.3.1"
DGX_OTA_DATE="Thu Jan 15 19:07:36 CET 2026"

DGX_OTA_VERSION="7.4.0"
DGX_OTA_DATE="Mon Feb  2 19:34:58 CET 2026"

DGX_OTA_VERSION="7.5.0"
DGX_OTA_DATE="Sat Apr  4 15:11:50 CEST 2026"
"""

# A host installed from NVIDIA's image and never updated: no OTA line at all.
DGX_RELEASE_FRESH = 'DGX_NAME="DGX Spark"\nDGX_PRETTY_NAME="NVIDIA DGX Spark"\nDGX_SWBUILD_VERSION="7.5.0"\n'


def test_the_last_ota_update_is_the_release_a_host_runs() -> None:
    assert parse_dgx_release(DGX_RELEASE_UPDATED) == DgxRelease("NVIDIA DGX Spark", "7.2.3", "7.5.0")
    assert parse_dgx_release(DGX_RELEASE_UPDATED).describe() == "NVIDIA DGX Spark 7.5.0 (installed 7.2.3)"  # type: ignore[union-attr]
    fresh = parse_dgx_release(DGX_RELEASE_FRESH)
    assert fresh == DgxRelease("NVIDIA DGX Spark", "7.5.0", None)
    assert fresh is not None and fresh.describe() == "NVIDIA DGX Spark 7.5.0"
    assert parse_dgx_release("# nothing here\n\n") is None


def test_os_release_pretty_name_and_its_fallback() -> None:
    debian = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\n'
    assert parse_os_release(debian) == "Debian GNU/Linux 12 (bookworm)"
    assert (
        parse_os_release("NAME='Ubuntu'\nVERSION='24.04.4 LTS (Noble Numbat)'\n") == "Ubuntu 24.04.4 LTS (Noble Numbat)"
    )
    assert parse_os_release("ID=ubuntu\n") is None


@pytest.mark.parametrize(
    ("path", "text", "version"),
    [
        ("/sys/module/nvidia/version", "580.95.05\n", "580.95.05"),
        # GB10's open module (a two-Spark interconnect note; a DGX Spark driver-upgrade runbook)
        (
            "/proc/driver/nvidia/version",
            "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.173.02\n",
            "580.173.02",
        ),
        # the proprietary module's older wording (a public parser's test of an aarch64 host)
        (
            "/proc/driver/nvidia/version",
            "NVRM version: NVIDIA UNIX aarch64 Kernel Module  550.120  Fri Sep 13 11:01:10 UTC 2024\n",
            "550.120",
        ),
        ("/proc/driver/nvidia/version", "NVRM: something else\n", None),
        ("/sys/module/nvidia/version", "garbage\n", None),
    ],
)
def test_driver_version(path: str, text: str, version: str | None) -> None:
    assert parse_driver_version(path, text) == version


def test_cuda_version_from_the_nvidia_smi_header() -> None:
    # dgxspark03 and ObrienlabsDev/blog nvidia.md: a GB10 prints "Not Supported" for memory, the header is as usual
    header = "| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |\n"
    assert parse_nvidia_smi_header(header) == "13.0"
    assert parse_nvidia_smi_header("No devices were found\n") is None


def test_compute_apps() -> None:
    assert parse_compute_apps("") == ()
    assert parse_compute_apps("412633\n  9001 \n") == (412633, 9001)


@pytest.mark.parametrize(
    ("gid", "ipv4"),
    [
        ("0000:0000:0000:0000:0000:ffff:c0a8:640b", "192.168.100.11"),
        ("0000:0000:0000:0000:0000:ffff:0a64:b801\n", "10.100.184.1"),
        ("fe80:0000:0000:0000:4ebb:47ff:fe82:0e6a", None),  # the link-local GID of the same port
        ("0000:0000:0000:0000:0000:0000:0000:0000", None),  # an empty slot
        ("0000:0000:0000:0000:0000:ffff:c0a8", None),
    ],
)
def test_ipv4_of_a_gid(gid: str, ipv4: str | None) -> None:
    assert gid_ipv4(gid) == ipv4


def test_only_roce_v2_gids_count_and_the_lowest_index_wins() -> None:
    mapped = "0000:0000:0000:0000:0000:ffff:c0a8:640b"
    info = parse_host_info(
        {
            "rdma": [
                {
                    "name": "rocep1s0f1",
                    "netdevs": ["enp1s0f1np1"],
                    "port_state": "4: ACTIVE",
                    "gids": [
                        {"index": 2, "gid": mapped, "type": "IB/RoCE v1"},
                        {"index": 3, "gid": mapped, "type": "RoCE v2"},
                        {"index": 5, "gid": mapped, "type": "RoCE v2"},
                        {"index": 7, "gid": "0000:0000:0000:0000:0000:ffff:c0a8:650b", "type": None},
                    ],
                }
            ]
        }
    )
    hca = info.hca("rocep1s0f1")
    assert hca is not None and hca.active
    assert dict(hca.roce_v2_ipv4_gids) == {"192.168.100.11": 3}
    assert info.links is None and info.kernel is None and info.disks == {}


def test_a_port_that_is_not_active() -> None:
    info = parse_host_info({"rdma": [{"name": "r", "netdevs": [], "port_state": "1: DOWN", "gids": []}]})
    hca = info.hca("r")
    assert hca is not None and not hca.active


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "host is not an object"),
        ({"links": [{"name": "eth0", "operstate": "up", "mtu": "9000"}]}, "link eth0 mtu is not an integer"),
        (
            {
                "rdma": [
                    {
                        "name": "r",
                        "gids": [{"index": "3", "gid": "0000:0000:0000:0000:0000:ffff:c0a8:640b", "type": "RoCE v2"}],
                    }
                ]
            },
            "r gid index",
        ),
        ({"disks": {"/m": {"free": 1}}}, "disk /m total"),
    ],
)
def test_wrong_shapes_are_named(raw: object, message: str) -> None:
    with pytest.raises(HostInfoShapeError, match=message):
        parse_host_info(raw)
