"""The stand-in plays a Ray lane as lanes renders it: the head serves only once every node joined."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from reconciler.engines import render_lane
from reconciler.engines.ports import LanePorts, RayPorts
from reconciler.engines.vllm import RAY_HEAD_ARGV0, RAY_HEAD_SCRIPT, RAY_JOIN_TIMEOUT_S, ray_join_seconds
from reconciler.sim import standin_ray
from reconciler.sim.engineargs import scan_engine_argv
from reconciler.sim.registry import SimRegistry
from reconciler.sim.sshd import SimFleet
from reconciler.sim.standin_ray import engine_argv, ray_head, ray_worker
from tests.support.example import EUGR, example_state, with_lane

from .conftest import Eventually, Spawn, free_port

pytestmark = pytest.mark.timeout(60)

HEAD_ADDRESS = "192.168.0.1"  # a rendered data-plane address: the stand-ins reach it only through the map
MAP = {standin_ray.ADDRESSES_ENV: f"{HEAD_ADDRESS}=127.0.0.1"}


def _two_ports() -> tuple[int, int]:
    """Two different free ports (free_port twice can hand back the same one)."""
    first = free_port()
    while (second := free_port()) == first:
        pass
    return first, second


def _ray_ports(gcs: int) -> RayPorts:
    return RayPorts(gcs, gcs + 1, gcs + 2, gcs + 3, gcs + 4, gcs + 5, gcs + 6, gcs + 7, gcs + 100, gcs + 199)


def _head_argv(gcs: int, api: int, nodes: int, timeout: str) -> list[str]:
    flags = _ray_ports(gcs).start_flags(head=True)
    serve = ["vllm", "serve", "/models/m", "--served-model-name", "m", "--port", str(api)]
    return ["--bind", "127.0.0.1", "--", "/bin/sh", "-c", RAY_HEAD_SCRIPT, RAY_HEAD_ARGV0, HEAD_ADDRESS,
            str(nodes), timeout, *flags, *serve, "--distributed-executor-backend", "ray"]  # fmt: skip


def _worker_argv(gcs: int, node: str) -> list[str]:
    return ["--worker", "--", "ray", "start", "--address", f"{HEAD_ADDRESS}:{gcs}", "--node-ip-address", node,
            *_ray_ports(gcs).start_flags(head=False), "--block"]  # fmt: skip


def _listens(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _wait_for(check: object, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_the_head_serves_only_once_every_node_joined(spawn: Spawn, tmp_path: Path) -> None:
    gcs, api = _two_ports()
    spawn(*_worker_argv(gcs, "192.168.0.2"), env=MAP)  # before its head is up: it keeps trying, as a Ray node does
    time.sleep(0.5)
    head = spawn(*_head_argv(gcs, api, 3, "30"))
    assert _wait_for(lambda: _listens(gcs), 10)  # `ray start --head` is up
    time.sleep(1.2)
    assert not _listens(api), "vllm serve ran with 2 of 3 nodes"
    spawn(*_worker_argv(gcs, "192.168.0.3"), env=MAP)
    assert _wait_for(lambda: _listens(api), 10)
    assert head.poll() is None
    log = (tmp_path / "standin-1.log").read_text()
    waited = ray_join_seconds(log)  # the line the readiness gate reads
    assert waited is not None and waited >= 1.0, log
    assert "lanes: 3 of 3 Ray nodes joined after" in log


def test_a_head_whose_nodes_do_not_all_join_exits_as_its_script_does(spawn: Spawn, tmp_path: Path) -> None:
    gcs, api = _two_ports()
    head = spawn(*_head_argv(gcs, api, 3, "1"))
    spawn(*_worker_argv(gcs, "192.168.0.2"), env=MAP)
    assert head.wait(10) == 1
    log = (tmp_path / "standin-0.log").read_text()
    assert log.endswith("lanes: only 2 of 3 Ray nodes joined in 1 s\n"), log  # RAY_NODES_ALIVE's sys.exit text
    assert ray_join_seconds(log) is None
    assert not _listens(api)


def test_a_bare_connection_to_the_gcs_is_no_node(spawn: Spawn, tmp_path: Path) -> None:
    gcs, api = _two_ports()
    head = spawn(*_head_argv(gcs, api, 2, "2"))
    assert _wait_for(lambda: _listens(gcs), 10)
    with socket.create_connection(("127.0.0.1", gcs)):  # open while the head counts, but no node registered
        assert head.wait(10) == 1
    assert "lanes: only 1 of 2 Ray nodes joined in 2 s" in (tmp_path / "standin-0.log").read_text()


def test_a_head_serves_on_the_port_of_its_vllm_serve_not_the_gcs_port() -> None:
    gcs, api = 29000, 8000
    argv = _head_argv(gcs, api, 2, "5")[3:]
    assert scan_engine_argv(argv).port == gcs  # the tolerant scan alone takes `ray start --port=` first
    assert scan_engine_argv(engine_argv(argv)).port == api


def test_the_stand_in_reads_the_ray_lane_lanes_renders() -> None:
    state = with_lane(example_state(), EUGR, launcher="ray")
    lane = state.lanes[EUGR]
    specs = render_lane(lane, state.models[lane.model], state.fleet, state.hosts, state.commit)
    head = ray_head([specs[0].entrypoint or "", *specs[0].command])
    gcs = LanePorts.of(lane).ray.gcs
    host = state.hosts[lane.hosts[0]]
    held = {host.address} | {p.address.partition("/")[0] for p in host.data_plane}
    assert head is not None and head.address in held  # an address of the head's host (on a ring: its control one)
    assert (head.nodes, head.timeout, head.gcs_port) == (3, str(RAY_JOIN_TIMEOUT_S), gcs)
    assert head.serve[:2] == ("vllm", "serve")
    for spec in specs[1:]:
        worker = ray_worker([spec.entrypoint or "", *spec.command])
        assert worker is not None and (worker.head, worker.gcs_port) == (head.address, gcs)
    assert ray_worker([specs[0].entrypoint or "", *specs[0].command]) is None
    assert standin_ray.RAY_HEAD_ARGV0 == RAY_HEAD_ARGV0


async def test_the_shared_stand_in_ends_a_ray_head_rather_than_serve_without_its_nodes(
    registry: SimRegistry, tmp_path: Path, eventually: Eventually
) -> None:
    # Big fleets' one shared stand-in plays no Ray cluster: a head there must not become ready.
    gcs, api = _two_ports()
    image = registry.add("registry.lan:5000/vllm:ray").pinned
    fleet = SimFleet(["a"], base_address="127.78.9.", registry=registry, work_dir=tmp_path / "f", shared_standin=True)
    async with fleet:
        rt = fleet.runtime("a")
        head = _head_argv(gcs, api, 2, "30")[3:]  # without the stand-in's own options
        run = ["docker", "run", "-d", "--name", "l-r0", "--label", "lanes.rank=0", "--entrypoint", head[0], image]
        status, _, _ = await rt.execute([*run, *head[1:]])
        assert status == 0

        async def exited() -> bool:
            _, out, _ = await rt.execute(["docker", "ps", "-a", "--filter", "name=l-r0", "--format", "{{.Status}}"])
            return out.startswith("Exited (1)")

        await eventually(exited, 5)
        _, logs, _ = await rt.execute(["docker", "logs", "l-r0"])
        assert "needs its nodes to join, which the shared stand-in does not play" in logs
        assert api not in rt.listening_ports()
