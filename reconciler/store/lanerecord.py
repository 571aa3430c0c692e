"""A lane's record in the journal: its columns, its typed form, and the conversions between them.

Kept apart from the journal's writes (`reconciler.store.journal`) so the record's shape is read in one
place; `reconciler.store.schema` creates and migrates the tables it lives in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from reconciler.logsetup import redact

LANE_COLUMNS = (
    "name",
    "desired",
    "health",
    "desired_commit",
    "applied_commit",
    "hosts",
    "fingerprint",
    "last_error",
    "failed_fingerprint",
    "healthy_specs",
    "healthy_commit",
    "updated",
    "timings",
    "evidence",
    "retry_at",
    "transient_failures",
    "drift",
    "healthy_gate",
    "retry_fingerprint",
    "held_until",
    "staging",
    "swap_undone",
)

ADDED_LANE_COLUMNS: dict[str, type] = {
    "evidence": str,
    "retry_at": float,
    "transient_failures": int,
    "drift": str,
    "healthy_gate": str,
    "retry_fingerprint": str,
    "held_until": float,
    "staging": str,
    "swap_undone": str,
}
"""Columns added after the first release, with their types: an older journal gets them on open."""
ADDED_APPLY_COLUMNS: dict[str, type] = {"cause": str, "drift": str}
JSON_LANE_FIELDS = frozenset({"hosts", "healthy_specs", "timings", "evidence", "drift", "healthy_gate", "staging"})


@dataclass(frozen=True)
class LaneRecord:
    name: str
    desired: str
    health: str
    desired_commit: str | None
    applied_commit: str | None
    hosts: tuple[str, ...]
    fingerprint: str | None
    last_error: str | None
    failed_fingerprint: str | None
    healthy_specs: list[dict[str, Any]]
    healthy_commit: str | None
    updated: float
    timings: dict[str, float]
    evidence: dict[str, Any]
    """The latest evidence headline: pp, tg, file, commit, regression."""
    retry_at: float | None = None
    """When `retry_fingerprint`, which failed on a passing fault, may be tried again (epoch s)."""
    transient_failures: int = 0
    """Transient failures of the current desired spec in a row (reset when it changes or passes its gate)."""
    drift: dict[str, Any] | None = None
    """The last drift repaired: {"time", "items": [{"kind", "host", "container", "detail"}]}."""
    healthy_gate: dict[str, Any] | None = None
    """How to gate the last healthy spec on a rollback: {"host", "port", "served_model"}."""
    retry_fingerprint: str | None = None
    """The spec that `retry_at` and `transient_failures` are about."""
    held_until: float | None = None
    """A change held by a change window waits until then (epoch seconds); None when nothing is held."""
    staging: dict[str, Any] | None = None
    """A model being staged for the lane's next spec: {"model", "hosts": {host: {"done", "total", "rate_bps",
    "eta_s"}}}; None when nothing is copied."""
    swap_undone: str | None = None
    """Set when this lane's last failure undid a swap (it did not take the hosts another lane gave it): what was
    undone, said for people. The planner holds that swap's lanes while this lane's failed spec is held; a new
    transaction of the lane clears it."""


def record_from_row(row: dict[str, Any]) -> LaneRecord:
    """A `lanes` row (held writes merged in) as a LaneRecord; JSON columns decoded."""
    row = {key: row.get(key) for key in LANE_COLUMNS}
    return LaneRecord(
        name=row["name"],
        desired=row["desired"] or "running",
        health=row["health"] or "progressing",
        desired_commit=row["desired_commit"],
        applied_commit=row["applied_commit"],
        hosts=tuple(json.loads(row["hosts"] or "[]")),
        fingerprint=row["fingerprint"],
        last_error=row["last_error"],
        failed_fingerprint=row["failed_fingerprint"],
        healthy_specs=json.loads(row["healthy_specs"] or "[]"),
        healthy_commit=row["healthy_commit"],
        updated=row["updated"] or 0.0,
        timings=json.loads(row["timings"] or "{}"),
        evidence=json.loads(row.get("evidence") or "{}"),
        retry_at=row["retry_at"],
        transient_failures=int(row["transient_failures"] or 0),
        drift=json.loads(row["drift"]) if row["drift"] else None,
        healthy_gate=json.loads(row["healthy_gate"]) if row["healthy_gate"] else None,
        retry_fingerprint=row["retry_fingerprint"],
        held_until=row["held_until"],
        staging=json.loads(row["staging"]) if row.get("staging") else None,
        swap_undone=row["swap_undone"],
    )


def row_from_fields(name: str, updated: float, fields: dict[str, Any]) -> dict[str, Any]:
    """The columns an update writes: JSON columns encoded, everything else as given."""
    row: dict[str, Any] = {"name": name, "updated": updated}
    for key, value in fields.items():
        if key in JSON_LANE_FIELDS:
            row[key] = None if value is None else json.dumps(list(value) if key == "hosts" else value, default=str)
        elif key == "last_error" and isinstance(value, str):
            row[key] = redact(value)  # remote output can quote a secret (issue 14)
        else:
            row[key] = value
    return row
