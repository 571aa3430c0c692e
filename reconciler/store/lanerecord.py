"""A lane's record in the journal: its columns, its typed form, and the conversions between them.

Kept apart from the journal's writes (`reconciler.store.journal`) so the record's shape is read in one
place; `reconciler.store.schema` creates and migrates the tables it lives in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.logsetup import redact

TYPED_LANE_COLUMNS = (
    "healthy_fingerprint",
    "hold",
    "hold_by",
    "hold_why",
    "hold_since",
    "tx_kind",
    "tx_fingerprint",
    "tx_commit",
    "tx_phase",
    "tx_started",
    "tx_deadline",
    "tx_before",
    "tx_candidate",
    "error_engine",
    "error_at",
)
"""The columns of the typed lane state (issue 23) that the older columns do not already hold."""

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
    *TYPED_LANE_COLUMNS,
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
    # The typed lane state (`reconciler.lane.LaneState`, issue 23): a journal from before has none of them, and
    # its state is read from the columns above (`reconciler.store.lanestate.state_from_record`).
    "healthy_fingerprint": str,
    "hold": str,
    "hold_by": str,
    "hold_why": str,
    "hold_since": float,
    "tx_kind": str,
    "tx_fingerprint": str,
    "tx_commit": str,
    "tx_phase": str,
    "tx_started": float,
    "tx_deadline": float,
    "tx_before": str,
    "tx_candidate": str,
    "error_engine": str,
    "error_at": float,
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
    healthy_fingerprint: str | None = None
    """The fingerprint of `healthy_specs` (None in a journal from before the typed state)."""
    hold: str | None = None
    """The kind of the lane's hold (`reconciler.store.lanestate.HOLD_KINDS`); None in a journal from before the
    typed state, whose hold is read from `failed_fingerprint`, `retry_*` and `held_until`; "" for no hold."""
    hold_by: str | None = None
    hold_why: str | None = None
    hold_since: float | None = None
    """When a suspension began (`reconciler.lane.SuspendedBy.since`)."""
    tx_kind: str | None = None
    """The transaction in flight (`reconciler.lane.Transaction`), None when there is none."""
    tx_fingerprint: str | None = None
    tx_commit: str | None = None
    tx_phase: str | None = None
    tx_started: float | None = None
    tx_deadline: float | None = None
    tx_before: str | None = None
    tx_candidate: str | None = None
    """Blue/green's new head while it is watched, as `host port served_model` (JSON)."""
    error_engine: str | None = None
    """The engine's own words beside `last_error`, when an engine spoke."""
    error_at: float | None = None


def record_from_row(row: dict[str, Any], decoded: Mapping[str, Any] | None = None) -> LaneRecord:
    """A `lanes` row (held writes merged in) as a LaneRecord; JSON columns decoded, or taken from `decoded`
    (by column) where the caller has them decoded already."""
    row = {key: row.get(key) for key in LANE_COLUMNS}
    known = decoded or {}

    def load(column: str, empty: Any) -> Any:
        if column in known:
            return known[column]
        return json.loads(row[column]) if row[column] else empty

    return LaneRecord(
        name=row["name"],
        desired=row["desired"] or "running",
        health=row["health"] or "progressing",
        desired_commit=row["desired_commit"],
        applied_commit=row["applied_commit"],
        hosts=tuple(load("hosts", [])),
        fingerprint=row["fingerprint"],
        last_error=row["last_error"],
        failed_fingerprint=row["failed_fingerprint"],
        healthy_specs=load("healthy_specs", []),
        healthy_commit=row["healthy_commit"],
        updated=row["updated"] or 0.0,
        timings=load("timings", {}),
        evidence=load("evidence", {}),
        retry_at=row["retry_at"],
        transient_failures=int(row["transient_failures"] or 0),
        drift=load("drift", None),
        healthy_gate=load("healthy_gate", None),
        retry_fingerprint=row["retry_fingerprint"],
        held_until=row["held_until"],
        staging=load("staging", None),
        swap_undone=row["swap_undone"],
        **{column: row[column] for column in TYPED_LANE_COLUMNS},
    )


def row_from_fields(name: str, updated: float, fields: dict[str, Any]) -> dict[str, Any]:
    """The columns an update writes: JSON columns encoded, everything else as given."""
    row: dict[str, Any] = {"name": name, "updated": updated}
    for key, value in fields.items():
        if key in JSON_LANE_FIELDS:
            row[key] = None if value is None else json.dumps(list(value) if key == "hosts" else value, default=str)
        elif key in {"last_error", "error_engine"} and isinstance(value, str):
            row[key] = redact(value)  # remote output can quote a secret (issue 14)
        else:
            row[key] = value
    return row
