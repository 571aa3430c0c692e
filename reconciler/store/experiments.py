"""What the daemon did with each head of a trial branch (`lanes/trials/...`): tried once per commit.

A person's branch is tried when its head is new; the evidence commit the trial itself adds on top is
recorded too, so it is not taken for a new idea. A comparison kept here until the branch has a pull
request is posted then. Tables are made on first write, never at open (opening must not need a write).
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from reconciler.store.journal import Store

EXPERIMENTS = "experiments"  # the SQL below names it literally


def experiment(store: Store, branch: str, commit: str) -> dict[str, Any] | None:
    """The record of `branch` at `commit` (the tried head, or the evidence commit the trial added)."""
    if EXPERIMENTS not in store.db.table_names():
        return None
    try:
        rows = list(
            store.db.execute(
                "select * from experiments where branch = ? and (commit_sha = ? or evidence_commit = ?)",
                [branch, commit, commit],
            ).fetchall()
        )
    except sqlite3.OperationalError:
        return None
    if not rows:
        return None
    columns = [c.name for c in store.db.table(EXPERIMENTS).columns]
    return dict(zip(columns, rows[0], strict=True))


def experiments(store: Store, limit: int = 50) -> list[dict[str, Any]]:
    """The newest records first: `lanes status --daemon` and the dashboard show them."""
    if EXPERIMENTS not in store.db.table_names():
        return []
    return list(store.db.table(EXPERIMENTS).rows_where(order_by="tried_at desc", limit=limit))


COLUMNS: dict[str, type] = {
    "branch": str,
    "commit_sha": str,
    "tried_at": float,
    "state": str,
    "summary": str,
    "lanes": str,
    "report": str,
    "evidence_commit": str,
    "posted": int,
    "pull": str,
}


def record_experiment(store: Store, branch: str, commit: str, **fields: Any) -> None:
    """Upsert the record of `branch` at `commit` (state, summary, lanes, report, evidence_commit, posted, pull)."""
    unknown = set(fields) - set(COLUMNS)
    if unknown:
        raise ValueError(f"not a column of {EXPERIMENTS}: {', '.join(sorted(unknown))}")
    row = {"branch": branch, "commit_sha": commit, "tried_at": time.time(), **fields}

    def write() -> None:
        table = store.db.table(EXPERIMENTS)
        table.create(COLUMNS, pk=("branch", "commit_sha"), if_not_exists=True)
        table.upsert(row, pk=("branch", "commit_sha"))

    store._write(write)


def mark_posted(store: Store, branch: str, commit: str, url: str) -> None:
    """The comparison of `branch` at `commit` (its tried head or evidence commit) is on pull request `url`."""
    store._write(
        lambda: store.db.execute(
            "update experiments set posted = 1, pull = ? where branch = ? and (commit_sha = ? or evidence_commit = ?)",
            [url, branch, commit, commit],
        )
    )
