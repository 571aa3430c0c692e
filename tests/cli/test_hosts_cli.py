"""`lanes hosts` against simulated Sparks: the real command, over SSH, one probe per host.

The simulated hosts are started as `lanes demo` starts them (`start_sim`, which gives each its data plane
from the host files); the command then reads a commit whose host files point at them. What it prints is
checked as a person reads it (80 columns in a pipe, every figure whole) and as a script reads it (--json),
before and after a test breaks one host's data plane, and with one host that does not answer.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.source.loadcommit import load_commit
from tests.support.gitrepo import make_repo
from tests.support.lanesproc import run_lanes
from tests.support.sparks import DemoEnv, loopback, running_sparks

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
LANE = "qwen-2x"
DATA_PLANE = {  # one CX-7 port per host on one switch, as a fleet file says it
    "spark1": ("enp1s0f0np0", "192.168.100.11/24", "rocep1s0f0"),
    "spark2": ("enp1s0f0np0", "192.168.100.12/24", "rocep1s0f0"),
    "spark3": ("enp1s0f0np0", "192.168.100.13/24", "rocep1s0f0"),
}


def _files(addresses: dict[str, str], port: int, user: str) -> dict[str, bytes]:
    files = {
        f"policies/{p.name}": p.read_bytes() for p in (ROOT / "reconciler" / "scaffold" / "policies").glob("*.yaml")
    }
    files["state/fleet.yaml"] = (
        f"ssh_user: {user}\nssh_port: {port}\nhf_cache: /root/.cache/huggingface\nfabric:\n  mtu: 9000\n".encode()
    )
    for name, (iface, address, hca) in DATA_PLANE.items():
        files[f"state/hosts/{name}.yaml"] = (
            f"address: {addresses[name]}\ndata_plane:\n  - interface: {iface}\n    address: {address}\n    hca: {hca}\n"
        ).encode()
    files["state/models/qwen.yaml"] = (
        b'hf_repo: Qwen/Qwen3-8B\nrevision: "' + b"0" * 40 + b'"\npath: /srv/models/qwen\nweight_bytes: 16000000000\n'
        b"architecture:\n  layers: 36\n  attention: gqa\n  num_heads: 32\n  kv_heads: 8\n  head_dim: 128\n"
    )
    files[f"state/lanes/{LANE}.yaml"] = (
        b"engine: vllm\nengine_version: 0.32.0\nimage: vllm/vllm-openai@sha256:" + b"1" * 64 + b"\nmodel: qwen\n"
        b"hosts: [spark1, spark2]\ntp: 2\nmax_model_len: 32768\ngpu_memory_utilization: 0.8\nport: 8000\n"
    )
    return files


@pytest.fixture
async def sparks(tmp_path: Path) -> AsyncIterator[tuple[DemoEnv, Path]]:
    """Simulated spark1-3 (data planes from the host files), and a repo whose host files point at them."""
    placeholder = make_repo(tmp_path / "placeholder", _files(dict.fromkeys(DATA_PLANE, "192.0.2.1"), 22, "root"))
    async with running_sparks(load_commit(placeholder), tmp_path / "sim", base_address=loopback(41)) as env:
        targets = env.fleet.targets
        user = targets["spark1"].user
        files = _files({n: t.address for n, t in targets.items()}, targets["spark1"].port, user)
        repo = tmp_path / "repo"
        make_repo(repo, files)
        yield env, repo


async def _hosts(env: DemoEnv, repo: Path, *extra: str) -> tuple[int, str, str]:
    # In a pipe, with no COLUMNS: the width a script or `| less` gets (80).
    clean = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    args = ["hosts", "--repo", str(repo), "--known-hosts", str(env.fleet.known_hosts_path)]
    return await run_lanes(*args, "--ssh-key", str(env.fleet.client_key_path), *extra, env=clean)


def _rows(out: str) -> dict[str, Any]:
    return {row["name"]: row for row in json.loads(out)["hosts"]}


async def test_every_host_reports_its_facts_and_its_data_plane_agrees_with_the_state(
    sparks: tuple[DemoEnv, Path],
) -> None:
    env, repo = sparks
    code, out, err = await _hosts(env, repo, "--json")
    assert code == 0, err
    rows = _rows(out)
    assert sorted(rows) == ["spark1", "spark2", "spark3"]
    for name, (iface, address, hca) in DATA_PLANE.items():
        row = rows[name]
        assert row["reachable"] and row["blocks"] == [] and row["unknown"] == []
        info = row["info"]
        assert (info["os_release"], info["kernel"], info["arch"]) == (
            "Ubuntu 24.04.4 LTS",
            "6.17.0-1021-nvidia",
            "aarch64",
        )
        assert (info["driver_version"], info["cuda_version"]) == ("580.159.03", "13.0")
        link = next(lk for lk in info["links"] if lk["name"] == iface)
        assert (link["operstate"], link["mtu"], link["ipv4"]) == ("up", 9000, [address])
        device = next(d for d in info["rdma"] if d["name"] == hca)
        assert device["roce_v2_ipv4_gids"] == {address.split("/")[0]: 3}
        assert row["memory"]["available_bytes"] > 100 << 30
        assert set(info["disks"]) == ({"/srv/models/qwen"} if name != "spark3" else set()) | {
            "/root/.cache/huggingface"
        }

    code, text, err = await _hosts(env, repo)
    assert code == 0, err
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    # Wrapped, never cut: no figure is parted from its unit, no GID index from its name.
    cut = [
        (a, b)
        for a, b in itertools.pairwise(lines)
        if a.split()
        and b.split()
        and (
            b.split()[0] in {"Gb/s", "Mb/s", "GiB", "ACTIVE,", "DOWN,"}
            or (a.split()[-1] in {"MTU", "GID", "v2"} and b.split()[0][0].isdigit())
        )
    ]
    assert not cut
    block = text.split("\n\n")[0]
    assert block.startswith("spark1 (")
    flat = " ".join(block.split())  # wrapped lines read as one
    for figure in (
        "Ubuntu 24.04.4 LTS; NVIDIA DGX Spark 7.5.0 (installed 7.2.3)",
        "6.17.0-1021-nvidia (aarch64)",
        "driver 580.159.03, CUDA 13.0, compute processes: none",
        "enp1s0f0np0 [data plane: 192.168.100.11/24]: up, MTU 9000, 200 Gb/s, 192.168.100.11/24",
        "rocep1s0f0 [data plane: enp1s0f0np0]: 4: ACTIVE, on enp1s0f0np0, RoCE v2 GID 3 for 192.168.100.11",
        "/srv/models/qwen:",
    ):
        assert figure in flat, (figure, block)


async def test_a_broken_data_plane_is_shown_with_the_lane_it_keeps_off_the_host(sparks: tuple[DemoEnv, Path]) -> None:
    env, repo = sparks
    spark2 = env.fleet.runtime("spark2").facts.info
    spark2.links["enp1s0f0np0"].mtu = 1500
    spark2.links["enp1s0f0np0"].ipv4 = ["192.168.100.99/24"]
    env.fleet.runtime("spark3").facts.info.links["enp1s0f0np0"].unplug()  # spark3 serves no lane: no block
    code, out, err = await _hosts(env, repo, "--json")
    assert code == 0, err
    rows = _rows(out)
    assert rows["spark2"]["blocks"] == [
        {"lane": LANE, "reason": "enp1s0f0np0 does not carry 192.168.100.12/24 (it has 192.168.100.99/24)"},
        {"lane": LANE, "reason": "enp1s0f0np0 has MTU 1500, below the fleet's 9000"},
        {
            "lane": LANE,
            "reason": "rocep1s0f0 has no RoCE v2 GID for 192.168.100.12 (its IPv4 RoCE v2 GIDs: 192.168.100.99 at 3); "
            "NCCL would fail every RDMA connect",
        },
    ]
    assert rows["spark1"]["blocks"] == [] and rows["spark3"]["blocks"] == []
    code, text, _ = await _hosts(env, repo, "--host", "spark2")
    assert code == 0
    flat = " ".join(text.split())
    assert f"blocks lane {LANE}: enp1s0f0np0 does not carry 192.168.100.12/24" in flat
    assert text.startswith("spark2 (") and "spark1" not in text


async def test_unknown_facts_and_an_unreachable_host_are_said(sparks: tuple[DemoEnv, Path], tmp_path: Path) -> None:
    env, repo = sparks
    spark1 = env.fleet.runtime("spark1").facts.info
    spark1.nvidia_smi = False
    spark1.rdma = None
    code, text, _ = await _hosts(env, repo, "--host", "spark1")
    assert code == 0
    flat = " ".join(text.split())
    assert "driver 580.159.03, CUDA unknown, compute processes: unknown" in flat
    assert "rdma unknown" in flat
    assert "unknown nvidia-smi: not found /sys/class/infiniband: Permission denied" in flat
    assert "blocks" not in flat  # what is unknown never keeps a lane off a host

    await env.fleet.host("spark3").stop()
    code, out, _ = await _hosts(env, repo, "--json")
    assert code == 4  # exitcodes.BLOCKED: a host did not answer
    rows = _rows(out)
    assert rows["spark3"]["reachable"] is False and rows["spark3"]["error"]
    assert json.loads(out)["unreachable"] == ["spark3"]
    code, text, _ = await _hosts(env, repo)
    assert code == 4
    assert any(line.startswith("spark3 (") and ": UNREACHABLE: " in line for line in text.splitlines())
