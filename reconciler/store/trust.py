"""What the daemon trusts of the state repo's history: the last commit it verified and acted on, and rewinds
an operator allowed.

With signed commits on, a head must descend from the last commit the daemon applied: a force-push of an
older signed commit (a lane with a known-bad engine) is a replay, refused until an operator says
otherwise with `lanes allow-rewind COMMIT --reason ...`, which records who and why here. Tables are made
on first write, never at open (opening must not need a write: a full disk).
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from typing import Any

from reconciler.errors import InputError
from reconciler.store.journal import Store

ANCHOR_KEY = "trusted-head"
REWINDS = "rewinds"
FULL_SHA = re.compile(r"^[0-9a-f]{40}$")


def anchor(store: Store) -> str | None:
    """The last commit the daemon verified and acted on, or None before the first one."""
    if "meta" not in store.db.table_names():
        return None
    rows = list(store.db.execute("select value from meta where key = ?", [ANCHOR_KEY]).fetchall())
    if not rows:
        return None
    value = json.loads(rows[0][0] or "{}")
    sha = value.get("sha")
    return str(sha) if sha else None


def set_anchor(store: Store, sha: str) -> None:
    row = {"key": ANCHOR_KEY, "value": json.dumps({"sha": sha, "time": time.time()})}
    store._write(lambda: store.db.table("meta").upsert(row, pk="key"))


def allow_rewind(store: Store, sha: str, *, by: str, reason: str) -> dict[str, Any]:
    """Record that `sha` may be applied although it does not descend from the anchor; the row written."""
    sha = sha.strip().lower()
    if not FULL_SHA.match(sha):
        raise InputError(f"'{sha}' is not a full commit id (40 hex digits, as the refusal names it)", field="COMMIT")
    if not reason.strip():
        raise InputError("a reason is required (--reason)", field="--reason")
    row = {"sha": sha, "by": by, "reason": reason.strip(), "time": time.time()}
    store._write(lambda: store.db.table(REWINDS).upsert(row, pk="sha"))
    return row


def allowed_rewind(store: Store, sha: str) -> dict[str, Any] | None:
    """Who allowed `sha` to rewind the branch and why, or None."""
    if REWINDS not in store.db.table_names():
        return None
    try:
        rows = list(store.db.table(REWINDS).rows_where("sha = ?", [sha]))
    except sqlite3.OperationalError:
        return None
    return dict(rows[0]) if rows else None
