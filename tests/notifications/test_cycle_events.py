"""What one real reconcile cycle on simulated Sparks gives to tell: a lane denied by policy and a first deploy that
never gets healthy (nothing to roll back to: `lane.failed`), each with its lane, commit, labels and command."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.notifications.events import cycle_events
from tests.support.example import EUGR, EUGR_REPO, NEVER_READY_HEALTH, PROD_HOSTS, PROD_REPO, PRODUCTION, with_lane
from tests.support.sparks import loopback
from tests.support.world import cycle_world, sim_world

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


async def test_a_denied_lane_and_a_failed_first_deploy(tmp_path: Path) -> None:
    async with sim_world(tmp_path, loopback(951)) as w:
        broken = w.fleet.registry.add(f"{EUGR_REPO}:never", env={"STANDIN_NEVER_HEALTHY": "1"}).pinned
        state = with_lane(w.state, EUGR, image=broken, health=NEVER_READY_HEALTH)
        state = with_lane(state, PRODUCTION, image=f"{PROD_REPO}:latest")
        result = await w.cycle(state)
        events = {e.kind: e for e in cycle_events(result, state)}
    assert sorted(events) == ["commit.denied", "lane.failed"]  # the untouched lanes say nothing
    commit = state.commit
    denied, failed = events["commit.denied"], events["lane.failed"]
    assert denied.lanes == (PRODUCTION,) and denied.commit == commit
    assert "image-digest" in denied.title and f"lanes check --rev {commit}" in denied.action
    assert denied.labels["role"] == frozenset({"production"})
    assert failed.lanes == (EUGR,) and failed.severity == "failure"
    assert "health not reached" in failed.what and f"lanes retry {EUGR}" in failed.action
    assert failed.labels["role"] == frozenset({"staging"})


async def test_a_bad_digest_fails_before_anything_stops_and_says_the_old_spec_still_serves(tmp_path: Path) -> None:
    """The pull fails before any rank is stopped: the notification must not say the lane may serve nothing."""
    async with cycle_world(tmp_path, 953) as w:
        before = w.snapshot(PROD_HOSTS)
        missing = f"{PROD_REPO}@sha256:{'0' * 64}"  # a digest the registry never had
        state = with_lane(w.state, PRODUCTION, image=missing)
        result = await w.cycle(state)
        events = [e for e in cycle_events(result, state) if e.lanes == (PRODUCTION,)]
        assert w.snapshot(PROD_HOSTS) == before  # the old ranks never stopped
    (failed,) = events
    assert failed.kind == "lane.failed" and "before anything stopped" in failed.title
    assert "Nothing was stopped; the old spec still serves" in failed.what
    assert "serves nothing" not in failed.what
