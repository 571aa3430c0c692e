"""Runtime holds on lanes: `lanes suspend LANE --reason R` and `lanes resume LANE`, recorded with who and why.

A lane file's `suspended: true` needs a commit; an operator in the middle of an incident needs the
daemon to keep its hands off a lane now (as `flux suspend` does), and everyone else needs to see who
asked for that and why. The hold itself is the lane's state (`reconciler.lane.SuspendedBy`, said by a
person), written through the one writer of lane state as a `Suspended` or `Resumed` event; the planner
reads it from there and treats the lane exactly like one whose lane file says `suspended: true`.

Each suspend and resume is also one row of the journal's `suspensions` table, never updated: the audit
trail of who held the lane and who let it go (`lanes history`). The table is this module's own and made
on the first suspend: reading a journal that never had one finds no history rather than failing.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from reconciler.lane import LANE_FILE, Resumed, Suspended, SuspendedBy
from reconciler.store.journal import Store
from reconciler.store.lanestate import lane_states
from reconciler.store.lanewriter import record
from reconciler.store.sqlite import durable

TABLE = "suspensions"
MAX_REASON = 500
"""Characters kept of a reason: it is shown in every status line of the lane."""
MAX_BY = 100


@dataclass(frozen=True)
class Suspension:
    lane: str
    by: str
    reason: str
    at: float

    @property
    def why(self) -> str:
        """The planner's reason for leaving the lane alone."""
        return SuspendedBy(self.by, self.reason).reason(self.lane)

    def as_json(self) -> dict[str, Any]:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.at))
        return {"by": self.by, "reason": self.reason, "at": stamp}


def _bounded(text: str, limit: int) -> str:
    text = " ".join(str(text).split())  # one line: it goes into tables, notes and notifications
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _record(store: Store, lane: str, action: str, by: str, reason: str) -> None:
    row: dict[str, Any] = {
        "lane": lane,
        "action": action,
        "by": _bounded(by, MAX_BY),
        "reason": _bounded(reason, MAX_REASON),
        "at": time.time(),
    }

    def write() -> None:
        with durable(store.db):
            store.db.table(TABLE).insert(row, pk="id", alter=True)

    # The store's own write path: a write the disk refuses is held in order, as every journal write is.
    store._write(write)


def suspend(store: Store, lane: str, by: str, reason: str) -> Suspension:
    """Hold `lane` from now on; suspending a held lane again records the new reason."""
    if not reason.strip():
        raise ValueError("a suspension needs a reason (--reason)")
    who, why = _bounded(by, MAX_BY) or "unknown", _bounded(reason, MAX_REASON)
    if who == LANE_FILE:
        raise ValueError(f"'{LANE_FILE}' is the lane file's own name for its hold: say who you are (--by)")
    record(store, lane, Suspended(by=who, why=why))
    _record(store, lane, "suspend", who, why)
    held = suspensions(store).get(lane)
    assert held is not None
    return held


def resume(store: Store, lane: str, by: str) -> Suspension | None:
    """Lift the hold on `lane`; the hold that was lifted, or None when the lane was not held."""
    held = suspensions(store).get(lane)
    if held is None:
        return None
    record(store, lane, Resumed())
    _record(store, lane, "resume", by, f"resumed (held since {held.as_json()['at']}: {held.reason})")
    return held


def _rows(store: Store, where: str | None = None, args: list[Any] | None = None) -> list[dict[str, Any]]:
    if TABLE not in store.db.table_names():
        return []
    try:
        return list(store.db.table(TABLE).rows_where(where, args or [], order_by="id"))
    except sqlite3.Error:
        return []


def suspensions(store: Store) -> dict[str, Suspension]:
    """lane -> its hold, for every lane a person holds now (from the lanes' states)."""
    held: dict[str, Suspension] = {}
    for lane, state in sorted(lane_states(store).items()):
        hold = state.suspension
        if hold is not None:
            held[lane] = Suspension(lane, hold.by, hold.why, hold.since or 0.0)
    return held


def suspension_history(store: Store, lane: str | None = None) -> list[dict[str, Any]]:
    """Every suspend and resume (of `lane`, or of all lanes), oldest first, as `lanes history` shows them."""
    rows = _rows(store, "lane = ?", [lane]) if lane else _rows(store)
    return [
        {"lane": r["lane"], "action": r["action"], "by": r["by"], "reason": r["reason"], "at": float(r["at"])}
        for r in rows
    ]
