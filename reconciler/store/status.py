"""The status of every lane, as `lanes status`, `/status` and the demo show it.

The journal's lane records say what was applied and how it went; the desired
state says what should be. A lane never applied yet shows as progressing (or
stopped), so a fresh daemon's status is complete from its first second.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from reconciler.facts.enginelog import engine_words
from reconciler.spec.load import DesiredState
from reconciler.store.journal import Store
from reconciler.store.suspensions import suspensions


def drift_text(drift: dict[str, Any] | None) -> str:
    """The last drift repaired, as a person reads it: 'repaired: lanes-x-r2 missing on dgx7'."""
    if not drift or not drift.get("items"):
        return ""
    parts = []
    for item in drift["items"]:
        detail = f" ({item['detail']})" if item.get("detail") else ""
        parts.append(f"{item['container']} {item['kind']} on {item['host']}{detail}")
    return "repaired: " + "; ".join(parts)


def trouble_text(row: dict[str, Any]) -> str:
    """A status row's last error and the last drift repaired, both: a later error does not hide what drifted.

    The drift is left out when the error already names it (a held lane's serving spec put back says so).
    """
    error, drift = error_text(row), drift_text(row.get("drift"))
    if drift and drift.removeprefix("repaired: ") in error:
        drift = ""
    return "; ".join(part for part in (error, drift) if part)


def error_text(row: Mapping[str, Any]) -> str:
    """A status row's last error with the engine's own words after it ('' when there is none)."""
    error, engine = row.get("last_error") or "", row.get("engine_error") or ""
    if engine and engine not in error:
        return f"{error}; engine: {engine}" if error else f"engine: {engine}"
    return error


def suspension_text(row: dict[str, Any]) -> str:
    """A runtime hold, as a person reads it in a status row ('' when the lane is not suspended at runtime)."""
    held = row.get("suspension")
    if not held:
        return ""
    return f"suspended by {held['by']} at {held['at']}: {held['reason']} (`lanes resume {row['name']}`)"


def last_engine_error(store: Store, lane: str) -> str | None:
    """The engine's own words from the lane's latest failed apply (its ranks' log tails), or None."""
    rows = store.db.table("applies").rows_where(
        "lane = ? and result in ('failed', 'rolled-back')", [lane], order_by="id desc", limit=1, select="logs"
    )
    for row in rows:
        try:
            logs = json.loads(row["logs"] or "{}")
        except ValueError:
            return None
        return engine_words(logs) if isinstance(logs, dict) else None
    return None


def instant_text(epoch: float | None) -> str | None:
    """An instant as people and tools read it: ISO 8601 in UTC, to the second."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def held_text(row: dict[str, Any]) -> str:
    """A change a change window holds, as a person reads it in a status row ('' when none is held)."""
    if not row.get("held_until"):
        return ""
    return f"change held until {row['held_until']} by a change window (`lanes apply --now` applies it at once)"


def status_rows(store: Store, desired: DesiredState | None) -> list[dict[str, Any]]:
    records = {r.name: r for r in store.lanes()}
    held = suspensions(store)
    names = sorted(set(records) | set(desired.lanes if desired else ()))
    rows = []
    for name in names:
        rec = records.get(name)
        lane = desired.lanes.get(name) if desired else None
        want = lane.desired if lane else (rec.desired if rec else "stopped")
        health = ("stopped" if want == "stopped" else "progressing") if rec is None else rec.health
        hold = held.get(name)
        rows.append(
            {
                "name": name,
                "desired": want,
                "health": health,
                "commit": rec.applied_commit if rec else None,
                "desired_commit": rec.desired_commit if rec else (desired.commit if desired else None),
                "hosts": list(lane.hosts if lane else (rec.hosts if rec else ())),
                "last_error": rec.last_error if rec else None,
                # The engine's own reason when the last error is a failed rollout (`a rank exited ...`): the lane's
                # state keeps it beside its last error; for a row from before that, its latest apply's logs.
                "engine_error": (rec.error_engine or last_engine_error(store, name))
                if rec and rec.last_error
                else None,
                # The journal never saw the lane applied (`progressing` is what is wanted of it): no record, or
                # only a hold put on it (`lanes suspend` of a lane no cycle has looked at: its row names no commit).
                "never_applied": rec is None
                or (rec.hold == "suspended" and rec.applied_commit is None and rec.desired_commit is None),
                "timings": rec.timings if rec else {},
                "phase": rec.tx_phase if rec else None,  # in flight: a rollout's draining, beside, watching
                "evidence": rec.evidence if rec else {},
                "updated": rec.updated if rec else None,
                "drift": rec.drift if rec else None,
                # Suspended is what the lane file says now; held is what the last cycle decided.
                "suspended": (bool(lane.suspended) if lane else False) or hold is not None,
                # A runtime hold (`lanes suspend`): who, why, when; the planner leaves the lane alone as well.
                "suspension": hold.as_json() if hold else None,
                "held_until": instant_text(rec.held_until) if rec else None,
                "staging": rec.staging if rec else None,
            }
        )
    return rows


def staging_text(staging: dict[str, Any] | None) -> str | None:
    """A model being staged, per host: how far, how fast, how long still; None when nothing is copied."""
    if not staging:
        return None
    parts = []
    for host, fig in sorted((staging.get("hosts") or {}).items()):
        done, total = (fig.get("done") or 0) / (1 << 30), (fig.get("total") or 0) / (1 << 30)
        eta = fig.get("eta_s")
        left = f", {eta:.0f} s left" if isinstance(eta, int | float) else ""
        parts.append(f"{host} {done:,.1f}/{total:,.1f} GiB at {(fig.get('rate_bps') or 0) / 1e6:,.0f} MB/s{left}")
    return f"staging model {staging.get('model')}: " + ("; ".join(parts) or "checking the hosts")
