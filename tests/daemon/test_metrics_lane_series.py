"""The per-lane health series are set in place at each status and removed for lanes gone, not all built
again (issue 27: clearing them rebuilt 1,750 series at each status of 250 lanes)."""

from __future__ import annotations

from prometheus_client import generate_latest

from reconciler.daemon.metrics import Metrics


def series(metrics: Metrics) -> dict[tuple[str, str], float]:
    text = generate_latest(metrics.registry).decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("lanes_lane_health{"):
            labels, value = line.removeprefix("lanes_lane_health{").split("} ")
            pairs = dict(p.split("=") for p in labels.split(","))
            out[(pairs["lane"].strip('"'), pairs["health"].strip('"'))] = float(value)
    return out


def test_a_lane_gone_loses_its_series_and_the_others_are_set_in_place() -> None:
    metrics = Metrics()
    metrics.update_from_status([{"name": "a", "health": "healthy"}, {"name": "b", "health": "failed"}])
    child = metrics.lane_health.labels(lane="a", health="degraded")
    assert series(metrics)[("a", "healthy")] == 1 and series(metrics)[("b", "failed")] == 1
    metrics.update_from_status([{"name": "a", "health": "degraded"}])
    seen = series(metrics)
    assert not [key for key in seen if key[0] == "b"]
    assert seen[("a", "degraded")] == 1 and seen[("a", "healthy")] == 0
    assert metrics.lane_health.labels(lane="a", health="degraded") is child  # set in place, not built again


def test_a_health_outside_the_usual_ones_is_shown_then_removed() -> None:
    metrics = Metrics()
    metrics.update_from_status([{"name": "a", "health": "confused"}])
    assert series(metrics)[("a", "confused")] == 1
    metrics.update_from_status([{"name": "a", "health": "healthy"}])
    assert ("a", "confused") not in series(metrics) and series(metrics)[("a", "healthy")] == 1
