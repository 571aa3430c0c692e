"""Observed health, typed outcomes and retries, on simulated Sparks through the real executor.

- an in-sync spec whose readiness no gate saw is gated again (`verify`), and only then healthy;
- a healthy lane whose engine stops answering (its process frozen, its container still running)
  becomes degraded with what the engine answered, and healthy again once it answers;
- an error lanes itself did not expect, in one lane's transaction, costs that lane only;
- a pull that failed on a passing fault (the registry down) is retried after a backoff, never
  condemned, until the flap limit says it is not passing;
- a lane rolled back to its last healthy spec is not taken on trust while its failed spec is held:
  its restored head is asked as an in-sync lane's is, and its restored ranks' drift is repaired, back
  to the healthy spec, never to the condemned one.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from reconciler.execute.hostops import HostOps
from reconciler.lane import FLAP_LIMIT
from reconciler.plan.steps import Cause
from reconciler.spec.load import DesiredState
from tests.support.example import EUGR, EUGR_HOSTS, EUGR_REPO, PRODUCTION, with_lane
from tests.support.world import World

pytestmark = pytest.mark.timeout(120)


def by_lane(result: object) -> dict[str, object]:
    return {r.lane: r for r in result.results}  # type: ignore[attr-defined]


async def test_a_spec_never_seen_ready_is_gated_before_it_is_called_healthy(world: World) -> None:
    await world.cycle()
    world.store.update_lane(EUGR, fingerprint=None)  # as after a daemon killed during the readiness wait
    result = await world.cycle()
    lp = result.plan.lane(EUGR)
    assert lp is not None and lp.action == "verify" and lp.cause == Cause.UNVERIFIED
    assert [s.kind for s in lp.steps] == ["lease", "wait-ready"]  # nothing is stopped or started
    assert by_lane(result)[EUGR].result == "verified"  # type: ignore[attr-defined]
    record = world.store.lane(EUGR)
    assert record is not None and record.health == "healthy" and record.fingerprint == lp.fingerprint
    assert (await world.cycle(apply=False)).plan.lane(EUGR).action == "noop"  # type: ignore[union-attr]


async def test_a_frozen_engine_makes_a_healthy_lane_degraded_until_it_answers(world: World) -> None:
    await world.cycle()
    head = world.fleet.runtime("dgx5").containers[f"lanes-{EUGR}-r0"]
    os.kill(head.pid, signal.SIGSTOP)
    try:
        result = await world.cycle()
        assert by_lane(result)[EUGR].result == "noop"  # type: ignore[attr-defined]
        record = world.store.lane(EUGR)
        assert record is not None and record.health == "degraded"
        assert "every rank runs, but the engine does not answer" in (record.last_error or "")
        assert ":8000/health did not answer" in (record.last_error or "")
        assert world.store.lane(PRODUCTION).health == "healthy"  # type: ignore[union-attr]
    finally:
        os.kill(head.pid, signal.SIGCONT)
    await world.cycle()
    record = world.store.lane(EUGR)
    assert record is not None and (record.health, record.last_error) == ("healthy", None)


async def test_an_unexpected_error_in_one_lanes_transaction_costs_that_lane_only(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_start = HostOps.start

    async def start(self: HostOps, host: str, spec: object) -> None:
        if getattr(spec, "name", "").startswith(f"lanes-{EUGR}-"):
            raise ZeroDivisionError("a bug in lanes")
        await real_start(self, host, spec)  # type: ignore[arg-type]

    monkeypatch.setattr(HostOps, "start", start)
    result = await world.cycle()
    results = by_lane(result)
    assert results[PRODUCTION].result == "applied"  # type: ignore[attr-defined]
    eugr = results[EUGR]
    assert eugr.result == "failed" and "ZeroDivisionError: a bug in lanes" in (eugr.error or "")  # type: ignore[attr-defined]


async def test_an_unexpected_error_outside_any_step_is_caught_per_lane(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reconciler.execute import transaction

    real = transaction.LaneTransaction.deploy

    async def deploy(self: transaction.LaneTransaction) -> object:
        if self.lp.lane == EUGR:
            raise RuntimeError("lanes broke before the first step")
        return await real(self)

    monkeypatch.setattr(transaction.LaneTransaction, "deploy", deploy)
    result = await world.cycle()
    results = by_lane(result)
    assert results[PRODUCTION].result == "applied"  # type: ignore[attr-defined]
    assert results[EUGR].result == "failed" and results[EUGR].cause == Cause.INTERNAL_ERROR  # type: ignore[attr-defined]
    record = world.store.lane(EUGR)
    assert record is not None and "lanes broke before the first step" in (record.last_error or "")


async def test_a_pull_failing_on_a_registry_outage_backs_off_then_is_condemned_past_the_flap_limit(
    world: World,
) -> None:
    await world.cycle()
    bump = world.fleet.registry.add(f"{EUGR_REPO}:outage").pinned
    desired = with_lane(world.state, EUGR, image=bump)
    world.fleet.registry.go_down()
    for failure in range(1, FLAP_LIMIT + 1):
        result = await world.cycle(desired)
        eugr = by_lane(result)[EUGR]
        assert eugr.result == "failed", eugr  # type: ignore[attr-defined]
        record = world.store.lane(EUGR)
        assert record is not None and record.health == "degraded"  # the old spec still serves
        assert record.transient_failures == failure
        if failure < FLAP_LIMIT:
            assert record.failed_fingerprint is None and record.retry_at is not None
            assert "a passing fault: tried again in" in (record.last_error or "")
            held = (await world.cycle(apply=False)).plan.lane(EUGR)
            assert held is not None and (held.action, held.cause) == ("blocked", Cause.BACKOFF)
            world.store.update_lane(EUGR, retry_at=time.time() - 1)  # the backoff has run out
        else:
            assert record.failed_fingerprint is not None and record.retry_at is None
            assert f"{FLAP_LIMIT} times in a row" in (record.last_error or "")
    held = (await world.cycle(apply=False)).plan.lane(EUGR)
    assert held is not None and held.cause == Cause.CONDEMNED
    world.fleet.registry.come_back()
    assert world.store.clear_failed(EUGR)
    assert by_lane(await world.cycle(desired))[EUGR].result == "applied"  # type: ignore[attr-defined]


async def rolled_back(world: World) -> tuple[DesiredState, dict[str, str]]:
    """EUGR converged, then a spec whose engine never gets ready: rolled back and condemned. Returns the broken
    state and the restored spec's hash per rank container."""
    await world.cycle()
    healthy = {
        name: c.labels["lanes.spec"]
        for host in EUGR_HOSTS
        for name, c in world.fleet.runtime(host).containers.items()
        if c.status == "running"
    }
    never = world.fleet.registry.add(f"{EUGR_REPO}:never", env={"STANDIN_NEVER_HEALTHY": "1"}).pinned
    quick = {"port_timeout_s": 5, "ready_timeout_s": 2, "models_timeout_s": 2, "completion_timeout_s": 2}
    broken = with_lane(world.state, EUGR, image=never, health={**quick, "poll_interval_s": 0.2})
    result = await world.cycle(broken)
    assert by_lane(result)[EUGR].result == "rolled-back", by_lane(result)[EUGR]  # type: ignore[attr-defined]
    record = world.store.lane(EUGR)
    assert record is not None and record.health == "degraded" and record.failed_fingerprint
    return broken, healthy


async def test_a_rolled_back_lane_whose_restored_head_stops_answering_is_degraded_with_that_reason(
    world: World,
) -> None:
    broken, _ = await rolled_back(world)
    held = await world.cycle(broken)
    assert (held.plan.lane(EUGR).action, held.plan.lane(EUGR).cause) == ("blocked", Cause.CONDEMNED)  # type: ignore[union-attr]
    record = world.store.lane(EUGR)
    assert record is not None and record.health == "degraded"
    assert "does not answer" not in (record.last_error or "")  # the restored head answers: only the held spec
    head = world.fleet.runtime(EUGR_HOSTS[0]).containers[f"lanes-{EUGR}-r0"]
    os.kill(head.pid, signal.SIGSTOP)
    try:
        result = await world.cycle(broken)
        assert by_lane(result)[EUGR].result == "blocked"  # type: ignore[attr-defined]
        record = world.store.lane(EUGR)
        assert record is not None and record.health == "degraded"
        assert "the engine does not answer" in (record.last_error or ""), record.last_error
        assert "/health did not answer" in (record.last_error or ""), record.last_error
        assert record.failed_fingerprint == held.plan.lane(EUGR).fingerprint  # type: ignore[union-attr]
    finally:
        os.kill(head.pid, signal.SIGCONT)
    await world.cycle(broken)
    record = world.store.lane(EUGR)
    assert record is not None and record.health == "degraded"  # answering again; the desired spec is still held
    assert "does not answer" not in (record.last_error or "") and "it failed with:" in (record.last_error or "")


async def test_a_rolled_back_lane_whose_restored_rank_is_removed_gets_the_healthy_spec_back(world: World) -> None:
    broken, healthy = await rolled_back(world)
    condemned = world.store.lane(EUGR).failed_fingerprint  # type: ignore[union-attr]
    rank = f"lanes-{EUGR}-r2"
    await world.docker(EUGR_HOSTS[2], "rm", "-f", rank)  # by hand, on the restored spec
    plan = (await world.cycle(broken, apply=False)).plan.lane(EUGR)
    assert plan is not None and (plan.action, plan.cause) == ("deploy", Cause.RESTORED_DRIFT)
    assert f"{rank} missing on {EUGR_HOSTS[2]}" in plan.reason and plan.fingerprint != condemned
    result = await world.cycle(broken)
    assert by_lane(result)[EUGR].result == "rolled-back", by_lane(result)[EUGR]  # type: ignore[attr-defined]
    running = {
        name: c.labels["lanes.spec"]
        for host in EUGR_HOSTS
        for name, c in world.fleet.runtime(host).containers.items()
        if c.status == "running"
    }
    assert running == healthy  # every rank on the spec that last passed its gate, none on the condemned one
    record = world.store.lane(EUGR)
    assert record is not None and record.health == "degraded" and record.failed_fingerprint == condemned
    assert f"{rank} missing on {EUGR_HOSTS[2]}" in (record.last_error or "")
    assert record.drift is not None
    assert record.drift["items"] == [{"kind": "missing", "host": EUGR_HOSTS[2], "container": rank, "detail": ""}]
    last = world.store.applies(EUGR, limit=1)[0]
    assert (last["cause"], last["result"]) == ("restored-drift", "rolled-back") and rank in last["drift"]
    again = (await world.cycle(broken, apply=False)).plan.lane(EUGR)
    assert again is not None and (again.action, again.cause) == ("blocked", Cause.CONDEMNED)
