"""Swap undos in flight: a giving lane the daemon is bringing back after the lane that took its hosts failed.

Written before the undo touches a host and removed once the giving lane is settled, so a daemon killed in
between (SIGKILL, a crash, a power cut) finds, back, that the lane must still be brought back: without
it the commit says the lane is stopped, nothing runs, and the hosts would serve nothing. Kept in the
`meta` table, one key per giving lane; made on first write, never at open.
"""

from __future__ import annotations

import json
import time
from typing import Any

from reconciler.store.journal import Store

PREFIX = "swap-restore:"


def mark_restore(store: Store, lane: str, *, taking: list[str], hosts: tuple[str, ...], cause: str, why: str) -> None:
    value = {"taking": taking, "hosts": list(hosts), "cause": cause, "why": why, "time": time.time()}
    row = {"key": PREFIX + lane, "value": json.dumps(value)}
    store._write(lambda: store.db.table("meta").upsert(row, pk="key"))


def pending_restores(store: Store) -> dict[str, dict[str, Any]]:
    """Giving lane -> {"taking", "hosts", "cause", "why"} of every undo that was begun and not settled."""
    if "meta" not in store.db.table_names():
        return {}
    rows = store.db.execute("select key, value from meta where key like ?", [PREFIX + "%"]).fetchall()
    return {str(key).removeprefix(PREFIX): json.loads(value or "{}") for key, value in rows}


def clear_restore(store: Store, lane: str) -> None:
    if "meta" in store.db.table_names():
        store._write(lambda: store.db.execute("delete from meta where key = ?", [PREFIX + lane]))
