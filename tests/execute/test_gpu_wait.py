"""Before any rank starts, the GPU of every rank host must be free of the ranks just stopped.

On a Spark a stopped engine's CUDA context can outlive its container for a
moment, and an engine started meanwhile dies ("CUDA-capable device(s) is/are
busy or unavailable"). The simulated hosts behave so (`gpu_release_s`), and
the transaction waits (`gpu-free` step) rather than starting into it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.support.example import PRODUCTION
from tests.support.world import World

pytestmark = pytest.mark.timeout(120)

PROD_HOSTS = ("dgx1", "dgx2", "dgx3", "dgx4")


def hold_gpu_after_stop(world: World, seconds: float) -> None:
    for host in PROD_HOSTS:
        world.fleet.runtime(host).daemon.gpu_release_s = seconds


async def test_a_redeploy_waits_for_the_old_ranks_gpu_then_starts(world: World) -> None:
    await world.cycle()
    hold_gpu_after_stop(world, 1.0)
    head = world.commit("production: new env", {PRODUCTION: {"env": {"SGLANG_ENABLE_JIT_DEEPGEMM": "1"}}})
    result = await world.cycle()
    production = next(r for r in result.results if r.lane == PRODUCTION)
    assert production.result == "applied", production.error
    assert production.timings["gpu_wait"] > 0  # it did wait: the old ranks' contexts were still held
    steps = [row["kind"] for row in world.journal(PRODUCTION, head)]
    assert steps.index("stop") < steps.index("gpu-free") < steps.index("start")
    for rank, host in enumerate(PROD_HOSTS):
        assert world.fleet.runtime(host).containers[f"lanes-{PRODUCTION}-r{rank}"].running


async def test_a_gpu_still_held_at_the_timeout_fails_the_lane_as_a_passing_fault_naming_the_holder(
    world: World,
) -> None:
    await world.cycle()
    hold_gpu_after_stop(world, 600.0)
    world.env.runner.settings = replace(world.env.runner.settings, gpu_free_timeout_s=0.5)
    world.commit("production: new env", {PRODUCTION: {"env": {"SGLANG_ENABLE_JIT_DEEPGEMM": "1"}}})
    result = await world.cycle()
    production = next(r for r in result.results if r.lane == PRODUCTION)
    assert production.result in {"failed", "rolled-back"}
    assert "the GPU was still held after 0 s by pid 4242 (python3)" in (production.error or "")
    record = world.store.lane(PRODUCTION)
    assert record is not None and record.failed_fingerprint is None  # not condemned: retried after a backoff
    assert record.retry_at is not None


async def test_a_drift_repair_that_fails_says_what_it_was_repairing(world: World) -> None:
    await world.cycle()
    rank = f"lanes-{PRODUCTION}-r1"
    await world.docker("dgx2", "rm", "-f", rank)  # by hand
    hold_gpu_after_stop(world, 600.0)  # the other ranks, stopped for the repair, keep their GPUs
    world.env.runner.settings = replace(world.env.runner.settings, gpu_free_timeout_s=0.5)
    result = await world.cycle()
    production = next(r for r in result.results if r.lane == PRODUCTION)
    assert production.result in {"failed", "rolled-back"}
    assert f"repairing {rank} missing on dgx2: " in (production.error or ""), production.error
    record = world.store.lane(PRODUCTION)
    assert record is not None and f"repairing {rank} missing on dgx2: " in (record.last_error or "")
    [last] = world.store.applies(PRODUCTION, limit=1)
    assert last["cause"] == "drift" and rank in last["drift"]
