"""A multi-host lane whose head never becomes healthy is rolled back on all four hosts, its logs kept."""

from __future__ import annotations

import pytest

from tests.rig.fleet import QUAD_HOSTS, applies, deployed, fleet_view, quad_and_solo, result_of, status_of
from tests.rig.rig import Rig

pytestmark = [pytest.mark.rig, pytest.mark.timeout(300)]

SHORT_HEALTH = {
    "port_timeout_s": 20,
    "ready_timeout_s": 5,
    "models_timeout_s": 5,
    "completion_timeout_s": 5,
    "poll_interval_s": 0.25,
}


def test_a_head_that_never_becomes_healthy_is_rolled_back_on_every_host(rig: Rig) -> None:
    rig.publish(quad_and_solo(rig), "quad healthy on v1")
    deployed(rig)
    before = fleet_view(rig)
    healthy = {host: before[host][f"lanes-quad-r{rank}"].spec for rank, host in enumerate(QUAD_HOSTS)}
    solo_before = before["rig2"]["lanes-solo-r0"]

    rig.publish(
        quad_and_solo(rig, quad_env={"STANDIN_NEVER_HEALTHY": "1"}, quad_health=SHORT_HEALTH),
        "quad: an engine switch that never gets healthy",
    )
    run = rig.apply()

    assert run.returncode == 1, run.describe()
    quad = result_of(run, "quad")
    assert quad["result"] == "rolled-back", run.describe()
    assert "health" in quad["error"], run.describe()
    view = fleet_view(rig)
    for rank, host in enumerate(QUAD_HOSTS):
        c = view[host][f"lanes-quad-r{rank}"]
        assert (c.spec, c.status) == (healthy[host], "running"), f"{host}: {c}\n{run.describe()}"
        assert "STANDIN_NEVER_HEALTHY=1" not in c.env
    assert view["rig2"]["lanes-solo-r0"].id == solo_before.id, "the other lane was not touched"
    row = status_of(rig, "quad")
    assert row["health"] == "degraded" and "rolled back" in row["last_error"], f"{row}\n{run.describe()}"
    # The last log lines of every rank of the failed spec are in the journal.
    failed = [a for a in applies(rig, "quad") if a["result"] == "rolled-back"]
    assert len(failed) == 1, applies(rig, "quad")
    logs = failed[0]["logs"]
    assert set(logs) == {f"lanes-quad-r{rank}@{host}" for rank, host in enumerate(QUAD_HOSTS)}, logs
    for key, text in logs.items():
        assert "serving quad-model on 0.0.0.0:8000" in text, (key, text)
    # The failed spec is not retried by the next apply; `lanes retry` allows it again.
    again = rig.plan()
    assert next(lp for lp in again.json()["lanes"] if lp["name"] == "quad")["action"] == "blocked", again.describe()
