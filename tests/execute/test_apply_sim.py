"""Apply against simulated Sparks: real SSH, real commands, real stand-in processes."""

from __future__ import annotations

import os
import stat

import pytest

from reconciler.plan.steps import WaitReady
from tests.support.example import EUGR, GLM, PRODUCTION, with_lane
from tests.support.world import World

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]
PROD_HOSTS = ["dgx1", "dgx2", "dgx3", "dgx4"]
EUGR_HOSTS = ["dgx5", "dgx6", "dgx7"]


def lane_containers(world: World, lane: str) -> dict[str, dict[str, str]]:
    """host -> labels of the running containers of `lane`."""
    out = {}
    for host in world.state.hosts:
        for labels in world.labels(host).values():
            if labels.get("lanes.lane") == lane:
                out[host] = labels
    return out


async def test_first_deploy_converges_and_a_second_cycle_does_nothing(world: World) -> None:
    result = await world.cycle()
    assert {r.lane: r.result for r in result.results} == {
        PRODUCTION: "applied",
        EUGR: "applied",
        GLM: "noop",
        "minimax-m31-flash-4x-flare": "noop",
    }
    prod = lane_containers(world, PRODUCTION)
    assert sorted(prod) == PROD_HOSTS
    assert [prod[h]["lanes.rank"] for h in PROD_HOSTS] == ["0", "1", "2", "3"]
    assert all(labels["lanes.commit"] == world.state.commit for labels in prod.values())
    assert sorted(lane_containers(world, EUGR)) == EUGR_HOSTS
    record = world.store.lane(PRODUCTION)
    assert record is not None and record.health == "healthy" and record.applied_commit == world.state.commit
    assert {"to_port", "to_health", "to_models", "to_token", "startup_ttft"} <= set(record.timings)
    again = await world.cycle()
    assert again.plan.empty


async def test_secrets_reach_hosts_only_through_a_0600_env_file(world: World) -> None:
    await world.cycle()
    runtime = world.fleet.runtime("dgx1")
    files = runtime.envfiles
    assert files, "an env file was written"
    ((_, record),) = [(p, r) for p, r in files.items() if PRODUCTION in p]
    content, mode = record if isinstance(record, tuple) else (record.content, record.mode)
    assert "HF_TOKEN=" in content and stat.S_IMODE(mode) == 0o600
    secret = content.split("HF_TOKEN=", 1)[1].strip()
    for host in PROD_HOSTS:
        for argv in world.fleet.commands_seen(host):
            assert not any(secret in part for part in argv), f"secret on a command line: {argv[:3]}"


async def test_image_bump_replaces_ranks_with_a_new_spec(world: World) -> None:
    await world.cycle()
    old = lane_containers(world, EUGR)
    new_image = world.fleet.registry.add("eugr/spark-vllm-b12x:nightly-20261120", env={"STANDIN_LOAD_S": "0.5"}).pinned
    result = await world.cycle(with_lane(world.state, EUGR, image=new_image))
    assert {r.lane: r.result for r in result.results}[EUGR] == "applied"
    new = lane_containers(world, EUGR)
    assert sorted(new) == EUGR_HOSTS
    assert all(new[h]["lanes.spec"] != old[h]["lanes.spec"] for h in EUGR_HOSTS)
    images = {c.image_ref for h in EUGR_HOSTS for c in world.fleet.runtime(h).containers.values()}
    assert images == {new_image}
    assert (await world.cycle()).plan.empty


async def test_a_digest_missing_from_the_registry_fails_and_keeps_old_ranks(world: World) -> None:
    await world.cycle()
    old = lane_containers(world, EUGR)
    missing = "eugr/spark-vllm-b12x@sha256:" + "0" * 64
    result = await world.cycle(with_lane(world.state, EUGR, image=missing))
    res = {r.lane: r for r in result.results}[EUGR]
    assert res.result == "failed"
    assert missing in (res.error or "") and "dgx5" in (res.error or "")
    assert lane_containers(world, EUGR) == old
    record = world.store.lane(EUGR)
    assert record is not None and record.health == "degraded" and missing in (record.last_error or "")


async def test_a_lane_moved_to_other_hosts(world: World) -> None:
    await world.cycle()
    moved = with_lane(world.state, EUGR, hosts=["dgx7", "dgx6", "dgx5"])
    result = await world.cycle(moved)
    assert {r.lane: r.result for r in result.results}[EUGR] == "applied"
    now = lane_containers(world, EUGR)
    assert now["dgx7"]["lanes.rank"] == "0" and now["dgx5"]["lanes.rank"] == "2"
    wait = next(s for s in result.plan.lane(EUGR).steps if isinstance(s, WaitReady))  # type: ignore[union-attr]
    assert wait.host == "dgx7"


async def test_a_stopped_lane_has_its_containers_removed(world: World) -> None:
    await world.cycle()
    result = await world.cycle(with_lane(world.state, EUGR, desired="stopped"))
    assert {r.lane: r.result for r in result.results}[EUGR] == "stopped"
    assert lane_containers(world, EUGR) == {}
    assert all(not world.fleet.runtime(h).containers for h in EUGR_HOSTS)
    assert sorted(lane_containers(world, PRODUCTION)) == PROD_HOSTS
    record = world.store.lane(EUGR)
    assert record is not None and record.health == "stopped"


async def test_drift_is_repaired(world: World) -> None:
    await world.cycle()
    await world.docker("dgx6", "rm", "-f", f"lanes-{EUGR}-r1")
    plan = (await world.cycle(apply=False)).plan
    assert plan.lane(EUGR).action == "deploy"  # type: ignore[union-attr]
    assert "missing on dgx6" in plan.lane(EUGR).reason  # type: ignore[union-attr]
    result = await world.cycle()
    assert {r.lane: r.result for r in result.results}[EUGR] == "applied"
    assert sorted(lane_containers(world, EUGR)) == EUGR_HOSTS
    assert (await world.cycle()).plan.empty


async def test_an_engine_that_never_becomes_healthy_is_rolled_back_and_not_retried(world: World) -> None:
    await world.cycle()
    old = lane_containers(world, PRODUCTION)
    bad = world.fleet.registry.add(
        "aidendle94/sparkrun-sglang-dsv41-gb10:broken", env={"STANDIN_NEVER_HEALTHY": "1"}
    ).pinned
    broken = with_lane(
        world.state,
        PRODUCTION,
        image=bad,
        health={
            "port_timeout_s": 5,
            "ready_timeout_s": 2,
            "models_timeout_s": 2,
            "completion_timeout_s": 2,
            "poll_interval_s": 0.2,
        },
    )
    result = await world.cycle(broken)
    res = {r.lane: r for r in result.results}[PRODUCTION]
    assert res.result == "rolled-back", res.error
    assert "health" in (res.error or "")
    assert sorted(res.logs) == sorted(f"lanes-{PRODUCTION}-r{i}@dgx{i + 1}" for i in range(4))
    restored = lane_containers(world, PRODUCTION)
    assert {h: labels["lanes.spec"] for h, labels in restored.items()} == {
        h: labels["lanes.spec"] for h, labels in old.items()
    }
    record = world.store.lane(PRODUCTION)
    assert record is not None and record.health == "degraded" and record.failed_fingerprint
    assert {r.lane: r.result for r in result.results}[EUGR] == "noop"
    again = await world.cycle()
    lp = again.plan.lane(PRODUCTION)
    assert lp is not None and lp.action == "blocked" and "lanes retry" in lp.reason
    # Held back, the lane still says what the spec failed with, and keeps saying it cycle after cycle.
    for _ in range(2):
        held = world.store.lane(PRODUCTION)
        assert held is not None and held.last_error is not None
        assert "lanes retry" in held.last_error and "it failed with:" in held.last_error
        assert "health" in held.last_error.split("it failed with:", 1)[1]
        await world.cycle()
    assert world.store.clear_failed(PRODUCTION)
    assert (await world.cycle(apply=False)).plan.lane(PRODUCTION).action == "deploy"  # type: ignore[union-attr]


async def test_a_host_that_does_not_answer_blocks_only_its_lanes(world: World) -> None:
    await world.fleet.stop_host("dgx6")
    result = await world.cycle()
    by_lane = {r.lane: r for r in result.results}
    assert by_lane[PRODUCTION].result == "applied"
    assert by_lane[EUGR].result == "blocked" and "dgx6" in (by_lane[EUGR].error or "")
    assert "dgx6" in result.observed.unreachable()
    await world.fleet.start_host("dgx6")
    result = await world.cycle()
    assert {r.lane: r.result for r in result.results}[EUGR] == "applied"


async def test_a_changed_host_key_is_refused_and_no_command_is_sent(world: World) -> None:
    await world.fleet.replace_host_key("dgx7")
    seen_before = len(world.fleet.commands_seen("dgx7"))
    result = await world.cycle()
    assert len(world.fleet.commands_seen("dgx7")) == seen_before
    dgx7 = result.observed.hosts["dgx7"]
    assert not dgx7.reachable and "host key" in (dgx7.error or "")
    assert {r.lane: r.result for r in result.results}[EUGR] == "blocked"
    assert world.fleet.runtime("dgx7").containers == {}
    record = world.store.lane(EUGR)
    assert record is not None and "host key" in (record.last_error or "")
    assert os.environ.get("LANES_TEST_NEVER_SET") is None
