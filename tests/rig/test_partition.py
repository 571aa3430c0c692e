"""A host cut off mid-apply (`ip link set DEV down` during the readiness wait), then reconnected."""

from __future__ import annotations

import time

import pytest

from tests.rig.fleet import QUAD_HOSTS, converged, deployed, digest_of, fleet_view, quad_and_solo, result_of, status_of
from tests.rig.rig import Rig

pytestmark = [pytest.mark.rig, pytest.mark.timeout(300)]

GATE = {
    "port_timeout_s": 5,
    "ready_timeout_s": 8,
    "models_timeout_s": 5,
    "completion_timeout_s": 5,
    "poll_interval_s": 0.25,
}


def test_a_head_partitioned_during_the_readiness_wait_is_rolled_back_and_converges_after(rig: Rig) -> None:
    assert rig.images is not None
    rig.publish(quad_and_solo(rig), "v1 everywhere")
    deployed(rig)
    before = fleet_view(rig)
    v1_specs = {h: before[h][f"lanes-quad-r{r}"].spec for r, h in enumerate(QUAD_HOSTS)}
    solo_before = before["rig2"]["lanes-solo-r0"]
    rig.publish(
        quad_and_solo(rig, image_ref=rig.images.v2, quad_env={"STANDIN_PORT_DELAY_S": "1"}, quad_health=GATE),
        "quad: v2",
    )
    events: list[tuple[str, float]] = []

    def cut_during_the_gate(line: str) -> None:
        if "quad wait-ready" in line and "…" in line and not events:
            rig.set_link("rig1", False)  # the head's cable, while lanes waits for it to answer
            events.append(("down", time.monotonic()))
        elif "quad wait-ready" in line and "✗" in line and len(events) == 1:
            rig.set_link("rig1", True)  # the partition heals after the gate gave up
            events.append(("up", time.monotonic()))

    try:
        run = rig.apply_watching(cut_during_the_gate)
    finally:
        rig.set_link("rig1", True)

    assert [e for e, _ in events] == ["down", "up"], run.describe()
    assert run.returncode == 1, run.describe()
    quad = result_of(run, "quad")
    assert quad["result"] == "rolled-back", run.describe()
    assert "readiness gate failed" in quad["error"], run.describe()
    view = fleet_view(rig)
    for rank, host in enumerate(QUAD_HOSTS):
        c = view[host][f"lanes-quad-r{rank}"]
        assert (c.spec, c.status, c.image_digest) == (v1_specs[host], "running", digest_of(rig.images.v1)), host
    solo = view["rig2"]["lanes-solo-r0"]
    assert (solo.id, solo.started_at, solo.status) == (solo_before.id, solo_before.started_at, "running")
    assert result_of(run, "solo")["result"] == "noop"
    assert status_of(rig, "quad")["health"] == "degraded"
    assert status_of(rig, "solo")["health"] == "healthy"

    # The link is back: the failed spec waits for `lanes retry`, then the next apply converges on v2.
    plan = rig.plan()
    assert plan.json()["unreachable"] == [], plan.describe()
    retry = rig.lanes("retry", "quad", "--db", str(rig.db))
    assert retry.returncode == 0, retry.describe()
    run = converged(rig)
    assert result_of(run, "quad")["result"] == "applied"
    after = fleet_view(rig)
    for rank, host in enumerate(QUAD_HOSTS):
        assert after[host][f"lanes-quad-r{rank}"].image_digest == digest_of(rig.images.v2)
    assert status_of(rig, "quad")["health"] == "healthy"
