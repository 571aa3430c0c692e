"""The per-lane health series follow each status: a lane gone loses its series, the others show their health.
They are made from one dict when /metrics is read, not kept as a Gauge child per lane and health (issue 27:
1,750 children at 250 lanes, rebuilt at each status, then 1.1 MB of the daemon's memory set in place)."""

from __future__ import annotations

from prometheus_client import generate_latest

from reconciler.daemon.metrics import HEALTHS, Metrics


def series(metrics: Metrics) -> dict[tuple[str, str], float]:
    text = generate_latest(metrics.registry).decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("lanes_lane_health{"):
            labels, value = line.removeprefix("lanes_lane_health{").split("} ")
            pairs = dict(p.split("=") for p in labels.split(","))
            out[(pairs["lane"].strip('"'), pairs["health"].strip('"'))] = float(value)
    return out


def test_a_lane_gone_loses_its_series_and_the_others_show_their_health() -> None:
    metrics = Metrics()
    metrics.update_from_status([{"name": "a", "health": "healthy"}, {"name": "b", "health": "failed"}])
    assert series(metrics)[("a", "healthy")] == 1 and series(metrics)[("b", "failed")] == 1
    assert sum(series(metrics).values()) == 2  # one state set per lane: every other health 0
    assert len(series(metrics)) == 2 * len(HEALTHS)
    metrics.update_from_status([{"name": "a", "health": "degraded"}])
    seen = series(metrics)
    assert not [key for key in seen if key[0] == "b"]
    assert seen[("a", "degraded")] == 1 and seen[("a", "healthy")] == 0


def test_no_object_is_kept_per_series() -> None:
    metrics = Metrics()
    metrics.update_from_status([{"name": f"lane-{i}", "health": "healthy"} for i in range(250)])
    assert len(series(metrics)) == 250 * len(HEALTHS)
    assert metrics.lane_health.current == {f"lane-{i}": "healthy" for i in range(250)}
    assert not hasattr(metrics.lane_health, "_metrics")  # a prometheus-client Gauge keeps its children there


def test_a_health_outside_the_usual_ones_is_shown_then_removed() -> None:
    metrics = Metrics()
    metrics.update_from_status([{"name": "a", "health": "confused"}])
    assert series(metrics)[("a", "confused")] == 1
    metrics.update_from_status([{"name": "a", "health": "healthy"}])
    assert ("a", "confused") not in series(metrics) and series(metrics)[("a", "healthy")] == 1
