"""A lane's typed state (`reconciler.lane.LaneState`) as its journal row, and back.

One row per lane. The columns written before the typed state keep their meaning (so an older lanes, or
`sqlite3`, still reads them): `failed_fingerprint` is the condemned spec, `retry_*` and
`transient_failures` the backoff, `held_until` the change window, `fingerprint` what serves. The state's
other parts have columns of their own (`TYPED_LANE_COLUMNS`). A row written before them (its `hold` is
NULL) is read from the older columns alone: a journal from before the typed state opens as it was.
"""

from __future__ import annotations

import json
from typing import Any

from reconciler.lane import (
    Backoff,
    Condemned,
    Gate,
    Hold,
    LaneHealth,
    LaneState,
    LastError,
    LeasedBy,
    Phase,
    Serving,
    SuspendedBy,
    Transaction,
    TxKind,
    Wanted,
    Window,
)
from reconciler.store.journal import Store
from reconciler.store.lanerecord import LaneRecord

HOLD_KINDS = {
    Condemned: "condemned",
    Backoff: "backoff",
    Window: "window",
    SuspendedBy: "suspended",
    LeasedBy: "leased",
}
"""The `hold` column's words; "" is no hold."""


def _health(text: str | None) -> LaneHealth | None:
    try:
        return LaneHealth(text) if text else None
    except ValueError:
        return None  # a journal written by a newer lanes: start from no knowledge rather than guess


def _failure(rec: LaneRecord) -> Condemned | Backoff | None:
    """The failed spec's hold, from the older columns (also what a suspension covers)."""
    if rec.failed_fingerprint:
        return Condemned(rec.failed_fingerprint, rec.transient_failures)
    if rec.retry_fingerprint and rec.retry_at is not None:
        return Backoff(rec.retry_fingerprint, rec.retry_at, rec.transient_failures)
    return None


def _hold(rec: LaneRecord) -> Hold | None:
    failure = _failure(rec)
    match rec.hold:
        case None:  # a row from before the typed state: a failed spec first, else a change window
            if failure is not None:
                return failure
            return Window(rec.held_until) if rec.held_until is not None else None
        case "condemned" | "backoff":
            return failure
        case "window":
            return Window(rec.held_until) if rec.held_until is not None else None
        case "suspended":
            return SuspendedBy(rec.hold_by or "", rec.hold_why or "", failure, rec.hold_since)
        case "leased":
            # A lease block keeps its next look in the backoff's time column (no fingerprint: not a backoff).
            return LeasedBy(rec.hold_by or "", rec.retry_at, rec.transient_failures)
    return None


def _healthy(rec: LaneRecord) -> Serving | None:
    if not rec.healthy_specs:
        return None
    where = rec.healthy_gate
    gate = Gate(str(where["host"]), int(where["port"]), str(where["served_model"])) if where else None
    # A row from before the typed state names the healthy spec's fingerprint only while it serves.
    fingerprint = rec.healthy_fingerprint or rec.fingerprint or ""
    return Serving(fingerprint, tuple(rec.healthy_specs), gate, rec.healthy_commit)


def _transaction(rec: LaneRecord) -> Transaction | None:
    if not rec.tx_kind or not rec.tx_phase:
        return None
    try:
        kind, phase = TxKind(rec.tx_kind), Phase(rec.tx_phase)
    except ValueError:
        return None
    return Transaction(
        kind,
        rec.tx_fingerprint,
        rec.tx_commit,
        phase,
        rec.tx_started or 0.0,
        rec.tx_deadline,
        _health(rec.tx_before),
        _gate(rec.tx_candidate),
    )


def _gate(text: str | None) -> Gate | None:
    """A candidate gate as `fields_from_state` wrote it (JSON); anything unreadable is no candidate."""
    if not text:
        return None
    try:
        where = json.loads(text)
        return Gate(str(where["host"]), int(where["port"]), str(where["served_model"]))
    except (ValueError, KeyError, TypeError):
        return None


def _gate_json(gate: Gate) -> str:
    return json.dumps({"host": gate.host, "port": gate.port, "served_model": gate.served_model})


def state_from_record(rec: LaneRecord | None) -> LaneState:
    if rec is None:
        return LaneState()
    error = LastError(rec.last_error, rec.error_engine, rec.error_at or rec.updated) if rec.last_error else None
    return LaneState(
        health=_health(rec.health),
        wanted=Wanted(rec.desired, rec.desired_commit, rec.hosts),
        applied=rec.applied_commit,
        serving=rec.fingerprint,
        healthy=_healthy(rec),
        hold=_hold(rec),
        transaction=_transaction(rec),
        error=error,
        swap_undone=rec.swap_undone,
    )


def fields_from_state(state: LaneState) -> dict[str, Any]:
    """Every column of the lane's state (the notes beside it, timings, drift, staging, evidence, are not)."""
    hold, failure = state.hold, state.hold.under if isinstance(state.hold, SuspendedBy) else state.hold
    condemned = failure if isinstance(failure, Condemned) else None
    backoff = failure if isinstance(failure, Backoff) else None
    op, error, healthy = state.transaction, state.error, state.healthy
    return {
        "health": state.health.value if state.health else None,
        "desired": state.wanted.desired,
        "desired_commit": state.wanted.commit,
        "hosts": state.wanted.hosts,
        "applied_commit": state.applied,
        "fingerprint": state.serving,
        "healthy_specs": [dict(spec) for spec in healthy.specs] if healthy else [],
        "healthy_gate": (
            {"host": healthy.gate.host, "port": healthy.gate.port, "served_model": healthy.gate.served_model}
            if healthy is not None and healthy.gate is not None
            else None
        ),
        "healthy_commit": healthy.commit if healthy else None,
        "healthy_fingerprint": healthy.fingerprint or None if healthy else None,
        "hold": HOLD_KINDS[type(hold)] if hold is not None else "",
        "hold_by": hold.by if isinstance(hold, SuspendedBy | LeasedBy) else None,
        "hold_why": hold.why if isinstance(hold, SuspendedBy) else None,
        "hold_since": hold.since if isinstance(hold, SuspendedBy) else None,
        "failed_fingerprint": condemned.fingerprint if condemned else None,
        "retry_fingerprint": backoff.fingerprint if backoff else None,
        "retry_at": backoff.at if backoff else hold.at if isinstance(hold, LeasedBy) else None,
        "transient_failures": (failure.n if isinstance(failure, Condemned | Backoff | LeasedBy) else 0),
        "held_until": hold.until if isinstance(hold, Window) else None,
        "tx_kind": op.kind.value if op else None,
        "tx_fingerprint": op.fingerprint if op else None,
        "tx_commit": op.commit if op else None,
        "tx_phase": op.phase.value if op else None,
        "tx_started": op.started if op else None,
        "tx_deadline": op.deadline if op else None,
        "tx_before": op.before.value if op and op.before else None,
        "tx_candidate": _gate_json(op.candidate) if op is not None and op.candidate is not None else None,
        "last_error": error.message if error else None,
        "error_engine": error.engine if error else None,
        "error_at": error.at if error else None,
        "swap_undone": state.swap_undone,
    }


def lane_states(store: Store) -> dict[str, LaneState]:
    """Every lane's state, as the planner takes them."""
    return {rec.name: state_from_record(rec) for rec in store.lanes()}


def last_start_s(rec: LaneRecord | None) -> float | None:
    """Seconds the lane's last start took to a first token (else to its gate): what a restart costs its clients."""
    timings = rec.timings if rec is not None else {}
    value = timings.get("to_token", timings.get("total")) if timings else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def last_starts(store: Store) -> dict[str, float]:
    """Every lane's last measured start (`last_start_s`), for the lanes that have one."""
    return {rec.name: s for rec in store.lanes() if (s := last_start_s(rec)) is not None}
