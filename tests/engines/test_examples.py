"""The example fleet's lanes in state/ render, running or stopped."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.engines import render_lane, start_groups
from reconciler.facts.docker import run_argv
from reconciler.spec import load_desired

from .golden import assert_golden

pytestmark = pytest.mark.timeout(30)

REPO = Path(__file__).resolve().parents[2]


def _state_files() -> dict[str, bytes]:
    root = REPO / "state"
    return {p.relative_to(REPO).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_example_lanes_render() -> None:
    desired = load_desired(_state_files(), "e" * 40)
    assert desired.lanes
    for lane in desired.lanes.values():
        specs = render_lane(lane, desired.models[lane.model], desired.fleet, desired.hosts, desired.commit)
        assert [s.name for s in specs] == [f"lanes-{lane.name}-r{rank}" for rank in range(lane.ranks)]
        assert sorted(r for group in start_groups(lane) for r in group) == list(range(lane.ranks))
        for spec in specs:
            argv = run_argv(spec)
            assert argv[:2] == ["docker", "run"]
            assert spec.image in argv


@pytest.mark.parametrize(
    "name",
    ["dsv41-flash-1017-4x-sglang", "eugr-nightly-dsv41-3x", "glm53-mxfp4-fp8-4x-r39", "minimax-m31-flash-4x-flare"],
)
def test_example_lane_golden(name: str) -> None:
    desired = load_desired(_state_files(), "e" * 40)
    lane = desired.lanes[name]
    assert_golden(
        f"example-{name}", render_lane(lane, desired.models[lane.model], desired.fleet, desired.hosts, desired.commit)
    )


def test_production_lane_rendezvous_on_the_switch_fabric_not_the_ssh_address() -> None:
    desired = load_desired(_state_files(), "e" * 40)
    lane = desired.lanes["dsv41-flash-1017-4x-sglang"]
    model = desired.models[lane.model]
    specs = render_lane(lane, model, desired.fleet, desired.hosts, desired.commit)
    head, worker = specs[0], specs[1]
    assert head.serves_http
    assert not worker.serves_http
    assert head.command[head.command.index("--node-rank") + 1] == "0"
    assert worker.command[worker.command.index("--node-rank") + 1] == "1"
    for rank, spec in enumerate(specs):
        env = spec.env_map
        fabric = desired.hosts[lane.hosts[rank]].data_plane[0]
        assert spec.command[spec.command.index("--dist-init-addr") + 1] == "192.168.100.11:28000"
        assert env["SGLANG_HOST_IP"] == fabric.ip != desired.hosts[lane.hosts[rank]].address
        assert (env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"]) == ("enp1s0f0np0", "enp1s0f0np0")
        # Both PCIe functions of the cabled CX-7 port, as the lane's own launcher lists them (RDMA_HCAS).
        assert (env["NCCL_IB_HCA"], env["NCCL_IB_ADDR_RANGE"]) == ("rocep1s0f0,roceP2p1s0f0", "192.168.100.0/24")
        # Per node, as its launcher passes it: read by the probe, so a placeholder without one (tests/engines/
        # test_host_env.py renders it probed).
        assert env["NCCL_IB_GID_INDEX"] == f"<lanes: roce_gid_index of {lane.hosts[rank]}, read by the probe>"
        assert spec.privileged and (spec.shm_size, spec.memory, spec.oom_score_adj) == (None, "112g", 500)
    assert head.secret_env == ("HF_TOKEN",)


def test_staging_lane_on_the_ring_uses_every_cable_for_rdma_and_the_control_network_for_sockets() -> None:
    desired = load_desired(_state_files(), "e" * 40)
    lane = desired.lanes["eugr-nightly-dsv41-3x"]
    specs = render_lane(lane, desired.models[lane.model], desired.fleet, desired.hosts, desired.commit)
    for rank, spec in enumerate(specs):
        env = spec.env_map
        host = desired.hosts[lane.hosts[rank]]
        assert env["VLLM_HOST_IP"] == host.address
        assert spec.command[spec.command.index("--master-addr") + 1] == desired.hosts["dgx5"].address
        assert env["NCCL_SOCKET_IFNAME"] == "enP7s7"
        assert env["NCCL_IB_HCA"].split(",") == [p.hca for p in host.data_plane]
        assert (env["NCCL_IB_SUBNET_AWARE_ROUTING"], env["NCCL_IB_MERGE_NICS"]) == ("1", "0")
        assert "NCCL_IB_ADDR_RANGE" not in env


def test_production_lane_switches_its_images_overlay_on_with_each_ranks_engram_rows() -> None:
    # The image's overlay installs nothing without SPARK_ENGRAM_DIR (sparkrun-recipes,
    # overlay/sitecustomize.py), and stock SGLang would load the Engram tables the lane declares offloaded.
    desired = load_desired(_state_files(), "e" * 40)
    lane = desired.lanes["dsv41-flash-1017-4x-sglang"]
    assert lane.offloaded_weight_bytes == 2 * 384_000_000 * 264
    specs = render_lane(lane, desired.models[lane.model], desired.fleet, desired.hosts, desired.commit)
    chunk = 2048  # the launcher's CHUNK default, which the lane passes as --chunked-prefill-size
    for spec in specs:
        env = spec.env_map
        rows = [m for m in spec.mounts if m.target == env["SPARK_ENGRAM_DIR"]]
        assert [(m.source, m.read_only) for m in rows] == [("/data/dsv41-engram-local", True)]
        assert spec.command[spec.command.index("--chunked-prefill-size") + 1] == str(chunk)
        # The launcher sizes the overlay's gather for max(CHUNK, MAXREQ x 8) ids x 32.
        assert env["SPARK_ENGRAM_MAX_IDS"] == str(max(chunk, lane.max_num_seqs * 8) * 32) == "65536"
        # Its RDMA collectives on, with the GID index each node's probe reads (`host_env`).
        assert env["SPARK_ROCE_AR"] == "1" and "B12X_ROCE_GID_INDEX" in env


def test_ranks_share_their_equal_env_and_label_pairs() -> None:
    """Each (key, value) pair equal across ranks and lanes is one object (issue 27: 1,000 ranks' pairs were
    about 1 MB of the daemon's memory); the specs, their order and hashes are as before (the golden tests)."""
    desired = load_desired(_state_files(), "e" * 40)
    specs = [
        spec
        for lane in desired.lanes.values()
        for spec in render_lane(lane, desired.models[lane.model], desired.fleet, desired.hosts, desired.commit)
    ]
    pairs: dict[tuple[str, str], tuple[str, str]] = {}
    for spec in specs:
        assert list(spec.env) == sorted(spec.env) and list(spec.labels) == sorted(spec.labels)
        for pair in (*spec.env, *spec.labels):
            assert pairs.setdefault(pair, pair) is pair
    assert len(pairs) < sum(len(s.env) + len(s.labels) for s in specs)  # some are shared indeed
