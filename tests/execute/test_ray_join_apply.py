"""An apply of a Ray lane against simulated Sparks: the head serves once every node joined, and the gate
records how long that took (`ray_join`); a head whose nodes do not all join fails the gate, saying so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.engines import vllm
from reconciler.execute.gate import RAY_GAVE_UP
from tests.support.example import EUGR, EUGR_HOSTS
from tests.support.world import World

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

LATE_S = 2.0
"""How much later than the others the last worker's container starts. The head's own figure starts once its
process is up (as the real script's starts after `ray start --head`), which on a loaded machine takes much of
that; tests/sim/test_standin_ray.py pins how long a head waits for a late node."""


async def head_says(world: World) -> float | None:
    """The join time the head's own log gives."""
    return vllm.ray_join_seconds(await world.docker(EUGR_HOSTS[0], "logs", f"lanes-{EUGR}-r0"))


async def test_an_apply_of_a_ray_lane_records_how_long_its_head_waited_for_its_nodes(world: World) -> None:
    await world.cycle()
    # The head starts first (a Ray lane's start order), the workers after it; dgx7's `docker run` takes
    # LATE_S longer, so the head waits for its third node before `vllm serve`.
    world.slow([EUGR_HOSTS[2]], "docker run", LATE_S)
    world.commit("eugr: ray", {EUGR: {"launcher": "ray"}})

    result = await world.cycle()

    eugr = next(r for r in result.results if r.lane == EUGR)
    assert eugr.result == "applied", eugr.error
    record = world.store.lane(EUGR)
    assert record is not None and record.health == "healthy"
    joined = record.timings.get("ray_join")
    assert joined is not None, record.timings
    assert joined == await head_says(world)  # what the head said, recorded by the apply
    assert 0 <= joined < LATE_S + 5, joined
    assert joined <= record.timings["to_port"]  # `vllm serve` (the port) only after the join


async def test_the_join_is_recorded_although_the_engine_logs_much_more_before_it_is_ready(world: World) -> None:
    await world.cycle()
    # As vLLM logs its load (hundreds of lines after the join line, far more than the log tail the gate
    # keeps): 120 lines of about 110 characters over a 4 s load, past HostOps.logs' last 8000 characters.
    chatty = world.fleet.registry.add(
        "eugr/spark-vllm-b12x:chatty", env={"STANDIN_LOAD_S": "4", "STANDIN_LOAD_LOG_LINES": "120"}
    ).pinned
    world.slow([EUGR_HOSTS[2]], "docker run", LATE_S)
    world.commit("eugr: ray, chatty", {EUGR: {"launcher": "ray", "image": chatty}})

    result = await world.cycle()

    eugr = next(r for r in result.results if r.lane == EUGR)
    assert eugr.result == "applied", eugr.error
    record = world.store.lane(EUGR)
    assert record is not None
    logs = await world.docker(EUGR_HOSTS[0], "logs", f"lanes-{EUGR}-r0")
    assert logs.count(", weights and caches being laid out") == 120
    said = vllm.ray_join_seconds(logs)
    assert said is not None  # the line is in the log, long before its end
    assert record.timings.get("ray_join") == said, record.timings


async def test_a_ray_lane_whose_worker_does_not_join_in_time_fails_its_gate_saying_so(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    await world.cycle()
    # The head gives up after 1 s (the rendered wait, shortened from 600 s); dgx7's container starts 4 s
    # after the others, so its node joins no head in time.
    monkeypatch.setattr(vllm, "RAY_JOIN_TIMEOUT_S", 1)
    world.slow([EUGR_HOSTS[2]], "docker run", 4.0)
    world.commit("eugr: ray", {EUGR: {"launcher": "ray"}})

    result = await world.cycle()

    eugr = next(r for r in result.results if r.lane == EUGR)
    assert eugr.result in {"rolled-back", "failed"}, eugr
    error = eugr.error or ""
    assert "readiness gate failed" in error, error
    assert f"lanes-{EUGR}-r0@{EUGR_HOSTS[0]} is exited" in error, error
    assert "only 2 of 3 Ray nodes joined in 1 s" in error, error
    record = world.store.lane(EUGR)
    assert record is not None and "ray_join" not in (record.timings or {})


def test_the_gate_reads_the_sentence_the_real_join_check_gives_up_with(tmp_path: Path) -> None:
    # RAY_NODES_ALIVE itself against a stand-in `ray` module with one live node of the three wanted.
    (tmp_path / "ray.py").write_text("def init(**kw): pass\ndef nodes(): return [{'Alive': True}, {'Alive': False}]\n")
    done = subprocess.run([sys.executable, "-c", vllm.RAY_NODES_ALIVE, "3", "0"], capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path)}, timeout=20, check=False)  # fmt: skip
    assert done.returncode == 1
    found = RAY_GAVE_UP.search(done.stderr)
    assert found is not None and found.group() == "lanes: only 1 of 3 Ray nodes joined in 0 s", done.stderr
