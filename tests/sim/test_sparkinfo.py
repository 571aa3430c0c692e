"""The host facts a simulated Spark answers: a GB10 by default, its data plane from the fleet state, and a
test's changes (link down, another MTU, no GID, no RDMA, no nvidia-smi), all through the real parser."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.facts import commands as fc
from reconciler.facts.hostinfo import DgxRelease, HostInfo
from reconciler.facts.observed import ObservedHost
from reconciler.facts.parse import parse_probe
from reconciler.sim.registry import SimRegistry
from reconciler.sim.runtime import SimContainerRuntime
from reconciler.sim.sparkinfo import SimHca

pytestmark = pytest.mark.timeout(60)

PROBE = fc.probe_argv(["/srv/models/m"], "/var/lib/lanes/lease.json", "/root/.cache/huggingface")


@pytest.fixture
async def runtime(registry: SimRegistry, tmp_path: Path) -> AsyncIterator[SimContainerRuntime]:
    rt = SimContainerRuntime("dgx9", "127.77.9.9", registry, tmp_path / "dgx9")
    yield rt
    await rt.shutdown()


async def _probe(rt: SimContainerRuntime) -> tuple[ObservedHost, HostInfo]:
    status, out, err = await rt.execute(PROBE)
    assert status == 0, err
    host = parse_probe("dgx9", out)
    assert host.info is not None
    return host, host.info


async def test_a_simulated_spark_reports_a_gb10_on_dgx_os(runtime: SimContainerRuntime) -> None:
    host, info = await _probe(runtime)
    assert host.probe_errors == ()
    assert info.os_release == "Ubuntu 24.04.4 LTS"
    assert info.dgx_release == DgxRelease("NVIDIA DGX Spark", "7.2.3", "7.5.0")
    assert (info.kernel, info.arch, info.driver_version, info.cuda_version) == (
        "6.17.0-1021-nvidia",
        "aarch64",
        "580.159.03",
        "13.0",
    )
    assert info.gpu_processes == ()
    # The four CX-7 netdevs; the cable is in port p1, so its two netdevs are up, without addresses yet.
    assert info.links is not None
    up = {lk.name: (lk.mtu, lk.speed_mbps) for lk in info.links if lk.up}
    assert up == {"enP7s7": (1500, 10_000), "enp1s0f1np1": (9000, 200_000), "enP2p1s0f1np1": (9000, 200_000)}
    assert info.rdma is not None
    assert {d.name: (d.netdevs, d.active) for d in info.rdma} == {
        "rocep1s0f0": (("enp1s0f0np0",), False),
        "rocep1s0f1": (("enp1s0f1np1",), True),
        "roceP2p1s0f0": (("enP2p1s0f0np0",), False),
        "roceP2p1s0f1": (("enP2p1s0f1np1",), True),
    }
    assert all(not d.roce_v2_ipv4_gids for d in info.rdma)  # no address, no IPv4 GID
    assert info.rdma_char_devices is not None and "uverbs3" in info.rdma_char_devices
    assert set(info.disks) == {"/srv/models/m", "/root/.cache/huggingface"}


async def test_the_data_plane_comes_from_the_fleet_state_and_a_test_can_break_it(
    runtime: SimContainerRuntime,
) -> None:
    spark = runtime.facts.info
    spark.set_data_plane([("enp1s0f1np1", "192.168.100.11/24", "rocep1s0f1"), ("eth9", "10.0.0.1/16", None)])
    _, info = await _probe(runtime)
    link = info.link("enp1s0f1np1")
    assert link is not None and (link.up, link.mtu, link.ipv4) == (True, 9000, ("192.168.100.11/24",))
    hca = info.hca("rocep1s0f1")
    assert hca is not None and hca.active
    assert dict(hca.roce_v2_ipv4_gids) == {"192.168.100.11": 3}  # the index a Spark shows
    extra = info.link("eth9")
    assert extra is not None and extra.up and extra.ipv4 == ("10.0.0.1/16",)
    # The cables are where the state says: the p1 netdev it does not name has none.
    unnamed = info.link("enP2p1s0f1np1")
    assert unnamed is not None and not unnamed.up
    assert [d.name for d in info.rdma or () if d.active] == ["rocep1s0f1"]

    spark.links["enp1s0f1np1"].unplug()
    spark.links["enP2p1s0f1np1"].mtu = 1500
    _, info = await _probe(runtime)
    down = info.link("enp1s0f1np1")
    assert down is not None and (down.operstate, down.speed_mbps) == ("down", None)
    hca = info.hca("rocep1s0f1")
    assert hca is not None and hca.port_state == "1: DOWN"
    other = info.link("enP2p1s0f1np1")
    assert other is not None and other.mtu == 1500

    spark.rdma = {"rocep1s0f1": SimHca("rocep1s0f1", ["enp1s0f1np1"], roce_v2=False)}
    _, info = await _probe(runtime)
    hca = info.hca("rocep1s0f1")
    assert hca is not None and dict(hca.roce_v2_ipv4_gids) == {}
    assert info.rdma_char_devices == ("issm0", "rdma_cm", "umad0", "uverbs0")

    spark.rdma = {}
    _, info = await _probe(runtime)
    assert (info.rdma, info.rdma_char_devices) == ((), ())


async def test_what_a_simulated_host_cannot_read_is_unknown_and_said(runtime: SimContainerRuntime) -> None:
    spark = runtime.facts.info
    spark.nvidia_smi = False
    spark.driver = None
    spark.rdma = None
    runtime.facts.disk = None
    host, info = await _probe(runtime)
    assert (info.driver_version, info.cuda_version, info.gpu_processes, info.rdma) == (None, None, None, None)
    assert info.disks == {}
    assert host.probe_errors == (
        "disk /root/.cache/huggingface: No such file or directory",
        "nvidia driver: not loaded (no /sys/module/nvidia/version, no /proc/driver/nvidia/version)",
        "nvidia-smi: not found",
        "/sys/class/infiniband: Permission denied",
    )


def _real_probe_host(tmp_path: Path) -> dict[str, Any]:
    argv = fc.probe_argv(["/srv/models/m"], str(tmp_path / "lease.json"), str(tmp_path))
    argv[0] = sys.executable
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
    host: dict[str, Any] = json.loads(out)["host"]
    return host


async def test_the_simulator_answers_in_the_shape_the_probe_program_prints(
    runtime: SimContainerRuntime, tmp_path: Path
) -> None:
    """The simulated host section and the real one (run here) have the same fields, link by link."""
    runtime.facts.info.set_data_plane([("enp1s0f1np1", "192.168.100.11/24", "rocep1s0f1")])
    sim: dict[str, Any] = json.loads((await runtime.execute(PROBE))[1])["host"]
    real = _real_probe_host(tmp_path)
    assert set(sim) == set(real)
    assert set(sim["uname"]) == set(real["uname"])
    assert {tuple(sorted(lk)) for lk in sim["links"]} == {tuple(sorted(lk)) for lk in real["links"]}
    assert {tuple(sorted(d)) for d in sim["disks"].values()} == {tuple(sorted(d)) for d in real["disks"].values()}
    hca = next(d for d in sim["rdma"] if d["name"] == "rocep1s0f1")
    # The real probe's RDMA entry, per probe_host_script.rdma_device (no RDMA on this machine to run it on).
    assert set(hca) == {"name", "netdevs", "port_state", "gids"}
    assert {tuple(sorted(g)) for g in hca["gids"]} == {("gid", "index", "type")}
