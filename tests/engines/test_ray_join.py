"""A Ray lane's head waits for every rank's node before `vllm serve`, and says how long it waited."""

from __future__ import annotations

import subprocess
import sys

import pytest

from reconciler.engines.vllm import RAY_NODES_ALIVE, is_ray_head, ray_join_seconds

from .conftest import LaneFactory, Renderer

pytestmark = pytest.mark.timeout(30)


def test_only_the_head_of_a_ray_lane_is_a_ray_head(make_lane: LaneFactory, render: Renderer) -> None:
    head, worker, *_ = render(make_lane(engine="vllm", launcher="ray", ep=4))
    assert is_ray_head(head) and not is_ray_head(worker)
    assert head.command[3:6] == ("192.168.100.11", "4", "600")  # its address, the nodes to wait for, how long
    assert not any(is_ray_head(s) for s in render(make_lane(engine="vllm", launcher="native", ep=4)))


def test_the_join_check_counts_live_nodes_and_prints_the_line_the_gate_reads(tmp_path: object) -> None:
    # The real program against a stand-in `ray` module: 3 live nodes of the 4 wanted at the first look, then 4.
    fake = tmp_path / "ray.py"  # type: ignore[operator]
    fake.write_text(
        "calls = [0]\n"
        "def init(**kw): pass\n"
        "def nodes():\n"
        "    calls[0] += 1\n"
        "    return [{'Alive': True}] * (3 if calls[0] < 2 else 4) + [{'Alive': False}]\n"
    )
    done = subprocess.run([sys.executable, "-c", RAY_NODES_ALIVE, "4", "30"], capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path)}, timeout=20, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    waited = ray_join_seconds("ray started\n" + done.stdout)
    assert waited is not None and waited >= 0
    short = subprocess.run([sys.executable, "-c", RAY_NODES_ALIVE, "9", "0"], capture_output=True, text=True,
                           env={"PYTHONPATH": str(tmp_path)}, timeout=20, check=False)  # fmt: skip
    assert short.returncode == 1 and "only 3 of 9 Ray nodes joined in 0 s" in short.stderr
    assert ray_join_seconds(short.stdout + short.stderr) is None
