"""Prometheus metrics of the daemon, in a registry of its own.

A registry per daemon (not prometheus-client's global one) keeps tests and
several daemons in one process independent, and keeps process/GC collectors
out unless asked for. Gauges describing lanes are rebuilt from the status
rows on every update, so a lane that disappears from the state stops being
reported instead of lingering with its last value.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from reconciler import __version__ as _version
from reconciler.lane import LaneHealth

HEALTHS = tuple(h.value for h in LaneHealth)
"""Every health a lane can have (`lanes status`); each is always exported, 0 when no lane has it."""

APPLIED = frozenset({"applied", "verified", "stopped"})
FAILED = frozenset({"failed", "rolled-back"})
TRANSACTIONS = APPLIED | FAILED
"""Results that touched hosts. `noop`, `denied` and `blocked` repeat every cycle a lane stays so: not counted."""

DURATION_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600)
"""A no-op cycle takes about a second; a lane whose model loads for 20 minutes takes that long."""


class LaneOutcome(Protocol):
    """What `record_cycle` needs of a lane result (`reconciler.execute.apply.LaneResult`)."""

    @property
    def lane(self) -> str: ...

    @property
    def result(self) -> str: ...


class LaneHealthSet:
    """`lanes_lane_health{lane, health}`: 1 for each lane's current health, 0 for every other, made from one
    dict when `/metrics` is read. As a `Gauge` it was a child object per lane and health, 1,750 at 250 lanes
    (1.1 MB of the daemon's memory, issue 27), each set at every status."""

    NAME = "lanes_lane_health"
    HELP = "1 for the current health of each lane, 0 for the others"

    def __init__(self) -> None:
        self.current: dict[str, str] = {}

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(self.NAME, self.HELP, labels=["lane", "health"])
        for lane, health in self.current.items():
            for h in sorted({*HEALTHS, health}):
                family.add_metric([lane, h], 1.0 if h == health else 0.0)
        yield family

    def describe(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(self.NAME, self.HELP, labels=["lane", "health"])


class Metrics:
    """The metric families of `/metrics`, and helpers that set them from what the daemon knows."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.info = Gauge("lanes_build_info", "lanes version, always 1", ["version"], registry=r)
        self.info.labels(version=_version).set(1)
        self.lanes = Gauge(
            "lanes_lanes", "Lanes by health (healthy, progressing, degraded, ...)", ["health"], registry=r
        )
        self.lane_health = LaneHealthSet()
        r.register(self.lane_health)
        self.last_reconcile = Gauge(
            "lanes_last_reconcile_timestamp_seconds", "Unix time the last reconcile cycle finished", registry=r
        )
        self.last_duration = Gauge(
            "lanes_last_reconcile_duration_seconds", "How long the last reconcile cycle took", registry=r
        )
        self.duration = Histogram(
            "lanes_reconcile_duration_seconds", "Reconcile cycle durations", buckets=DURATION_BUCKETS, registry=r
        )
        self.cycles = Counter(
            "lanes_reconcile_cycles", "Reconcile cycles by outcome (ok, failed, error)", ["outcome"], registry=r
        )
        self.applies = Counter(
            "lanes_lane_applies",
            "Lane transactions by lane and result (applied, stopped, rolled-back, failed)",
            ["lane", "result"],
            registry=r,
        )
        self.failures = Counter(
            "lanes_lane_failures", "Lane transactions that failed or were rolled back, by lane", ["lane"], registry=r
        )
        self.denials = Counter(
            "lanes_policy_denials",
            "Commits refused by policy, by rule (once per commit and rule)",
            ["rule"],
            registry=r,
        )
        self.releases_behind = Gauge(
            "lanes_upstream_releases_behind",
            "Upstream releases newer than the lane's engine build",
            ["lane"],
            registry=r,
        )
        self.days_behind = Gauge(
            "lanes_upstream_days_behind",
            "Days between the lane's engine build and the newest upstream release",
            ["lane"],
            registry=r,
        )
        self.store_writable = Gauge(
            "lanes_store_writable",
            "1 while the journal (sqlite) takes writes, 0 while the disk refuses them",
            registry=r,
        )
        self.store_held = Gauge(
            "lanes_store_held_writes", "Journal records held in memory because the disk refused them", registry=r
        )
        self.source_up = Gauge("lanes_source_up", "1 when the last fetch of the state repository worked", registry=r)
        self.fetch_failures = Counter(
            "lanes_source_fetch_failures", "Fetches of the state repository that failed", registry=r
        )
        self.last_fetch = Gauge(
            "lanes_source_last_fetch_success_timestamp_seconds",
            "Unix time of the last fetch of the state repository that worked",
            registry=r,
        )
        self.blocked = Gauge(
            "lanes_lanes_blocked",
            "Lanes the last cycle could not act on (a host leased by another reconciler, or unreachable)",
            registry=r,
        )
        self.staging_done = Gauge(
            "lanes_staging_bytes_done",
            "Bytes of a model staged on a host so far, while a lane's model is being staged",
            ["lane", "host"],
            registry=r,
        )
        self.staging_total = Gauge(
            "lanes_staging_bytes_total",
            "Bytes a host is to receive while a lane's model is being staged",
            ["lane", "host"],
            registry=r,
        )
        self.staging_rate = Gauge(
            "lanes_staging_rate_bytes_per_second",
            "The copy rate into a host while a lane's model is being staged",
            ["lane", "host"],
            registry=r,
        )
        self.notifications = Counter(
            "lanes_notifications",
            "Notification messages per receiver by outcome: sent, failed (after every retry) or dropped (queue full)",
            ["receiver", "outcome"],
            registry=r,
        )
        self.notifications_queued = Gauge(
            "lanes_notifications_queued",
            "Notification messages waiting in a receiver's queue",
            ["receiver"],
            registry=r,
        )
        self.store_writable.set(1)
        for outcome in ("ok", "failed", "error"):
            self.cycles.labels(outcome=outcome)
        for health in HEALTHS:
            self.lanes.labels(health=health).set(0)

    # -- setters ---------------------------------------------------------------------

    def record_notification(self, receiver: str, outcome: str) -> None:
        """A message to `receiver` was sent, failed after its retries, or dropped from a full queue."""
        self.notifications.labels(receiver=receiver, outcome=outcome).inc()

    def set_notifications_queued(self, queued: Mapping[str, int]) -> None:
        self.notifications_queued.clear()
        for receiver, n in queued.items():
            self.notifications_queued.labels(receiver=receiver).set(n)

    def update_from_status(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Set the lane gauges from `status_rows()` (`{"name", "health", ...}` per lane)."""
        counts = dict.fromkeys(HEALTHS, 0)
        current: dict[str, str] = {}
        rows_list = list(rows)
        for row in rows_list:
            health = str(row.get("health") or "progressing")
            counts[health] = counts.get(health, 0) + 1
            current[str(row["name"])] = health
        self.lanes.clear()
        for health, n in counts.items():
            self.lanes.labels(health=health).set(n)
        for gauge in (self.staging_done, self.staging_total, self.staging_rate):
            gauge.clear()
        for row in rows_list:
            for host, fig in ((row.get("staging") or {}).get("hosts") or {}).items():
                self.staging_done.labels(lane=row["name"], host=host).set(fig.get("done") or 0)
                self.staging_total.labels(lane=row["name"], host=host).set(fig.get("total") or 0)
                self.staging_rate.labels(lane=row["name"], host=host).set(fig.get("rate_bps") or 0)
        self.lane_health.current = current  # lanes gone are gone from /metrics with it

    def record_cycle(
        self,
        duration_s: float,
        results: Sequence[LaneOutcome] = (),
        *,
        error: str | None = None,
        finished: float | None = None,
    ) -> None:
        """One reconcile cycle finished (`error`: it stopped before applying, e.g. the commit could not load)."""
        self.last_reconcile.set(time.time() if finished is None else finished)
        self.last_duration.set(duration_s)
        self.duration.observe(duration_s)
        failed = False
        for r in results:
            if r.result not in TRANSACTIONS:
                continue
            self.applies.labels(lane=r.lane, result=r.result).inc()
            if r.result in FAILED:
                self.failures.labels(lane=r.lane).inc()
                failed = True
        self.cycles.labels(outcome="error" if error else ("failed" if failed else "ok")).inc()

    def record_denials(self, rules: Iterable[str]) -> None:
        """A new commit was denied: count each distinct rule once (call once per commit, not per resync)."""
        for rule in sorted(set(rules)):
            self.denials.labels(rule=rule).inc()

    def set_store(self, *, writable: bool, held: int) -> None:
        self.store_writable.set(1 if writable else 0)
        self.store_held.set(held)

    def record_fetch(self, *, ok: bool, when: float | None = None) -> None:
        self.source_up.set(1 if ok else 0)
        if ok:
            self.last_fetch.set(time.time() if when is None else when)
        else:
            self.fetch_failures.inc()

    def set_upstream_gaps(self, gaps: Mapping[str, tuple[int, float]]) -> None:
        """Replace the gap table: lane -> (releases behind, days behind)."""
        self.releases_behind.clear()
        self.days_behind.clear()
        for lane, (releases, days) in gaps.items():
            self.releases_behind.labels(lane=lane).set(releases)
            self.days_behind.labels(lane=lane).set(days)

    # -- exposition ------------------------------------------------------------------

    def render(self) -> tuple[bytes, str]:
        """The text exposition and its content type, for `HttpServer(metrics=...)`."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
