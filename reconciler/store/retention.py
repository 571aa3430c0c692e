"""How long the journal keeps its rows: the steps, applies and commit decisions tables stop growing forever.

The daemon prunes at start and once a day (`[retention]` in its settings). What `lanes status` and
`lanes history` need is never pruned, whatever its age:

- the `lanes` table (one row per lane: health, applied and healthy commit, the specs a rollback
  restores) is not touched;
- per lane, the newest apply and the newest one that applied or verified a spec (its last healthy
  record), and every apply of the commit the lane runs now or last ran healthy;
- the journal steps of those applies' runs, and every step still `started` (a transaction in flight
  or one a killed daemon left behind, which a restart looks at);
- the decisions about the commits the lanes run, want or ran healthy, the commit the daemon trusts
  last (signing), and the newest decision of all.

A setting of 0 days keeps that table whole. Nothing is pruned while the store holds writes it could not
make (a full disk): the deletes would run ahead of rows still waiting to be written.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from reconciler.store.journal import Store
from reconciler.store.trust import anchor

DAY_S = 86_400.0
HEALTHY_RESULTS = ("applied", "verified")


@dataclass(frozen=True)
class Retention:
    """Days each table keeps its rows (0: forever)."""

    journal_days: float = 30.0
    applies_days: float = 180.0
    commits_days: float = 180.0


@dataclass(frozen=True)
class Pruned:
    journal: int = 0
    applies: int = 0
    commits: int = 0
    skipped: str | None = None
    """Why nothing was pruned (writes held), or None."""


def _cutoff(days: float, now: float) -> float | None:
    return None if days <= 0 else now - days * DAY_S


def _kept_applies(store: Store) -> set[int]:
    db = store.db
    keep: set[int] = set()
    healthy = ",".join("?" for _ in HEALTHY_RESULTS)
    queries: list[tuple[str, list[str]]] = [
        ("select max(id) from applies group by lane", []),
        (f"select max(id) from applies where result in ({healthy}) group by lane", list(HEALTHY_RESULTS)),  # noqa: S608
        (
            "select a.id from applies a join lanes l on a.lane = l.name "
            "where a.[commit] in (l.applied_commit, l.healthy_commit)",
            [],
        ),
    ]
    for sql, args in queries:
        keep.update(int(row[0]) for row in db.execute(sql, args).fetchall() if row[0] is not None)
    return keep


def _kept_commits(store: Store) -> set[str]:
    db = store.db
    keep: set[str] = set()
    for row in db.execute("select applied_commit, healthy_commit, desired_commit from lanes").fetchall():
        keep.update(str(sha) for sha in row if sha)
    newest = db.execute("select sha from commits order by time desc limit 1").fetchone()
    if newest is not None:
        keep.add(str(newest[0]))
    trusted = anchor(store)
    if trusted:
        keep.add(trusted)
    return keep


def prune(store: Store, retention: Retention, *, now: float | None = None) -> Pruned:
    """Delete rows older than the retention allows, keeping what status and history need; one transaction."""
    if store.held_writes or store.problem:
        return Pruned(skipped=f"writes are held ({store.problem or 'pending'})")
    now = time.time() if now is None else now
    db = store.db
    tables = set(db.table_names())
    counts = {"journal": 0, "applies": 0, "commits": 0}
    conn = db.conn
    conn.execute("BEGIN IMMEDIATE")
    try:
        kept_runs: set[str] = set()
        applies_cut = _cutoff(retention.applies_days, now)
        if "applies" in tables:
            kept = _kept_applies(store)
            runs = db.execute("select run from applies where id in (select value from json_each(?))", [_json(kept)])
            kept_runs = {str(row[0]) for row in runs.fetchall()}
            if applies_cut is not None:
                cur = conn.execute(
                    "delete from applies where coalesce(finished, started) < ? "
                    "and id not in (select value from json_each(?))",
                    [applies_cut, _json(kept)],
                )
                counts["applies"] = cur.rowcount
        old_rows = (
            (
                "journal",
                retention.journal_days,
                "delete from journal where state != 'started' and coalesce(finished, started) < ? "
                "and run not in (select value from json_each(?))",
                _json(kept_runs),
            ),
            (
                "commits",
                retention.commits_days,
                "delete from commits where time < ? and sha not in (select value from json_each(?))",
                _json(_kept_commits(store)),
            ),
        )
        for table, days, sql, kept_json in old_rows:
            cut = _cutoff(days, now)
            if table in tables and cut is not None:
                counts[table] = conn.execute(sql, [cut, kept_json]).rowcount
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    if any(counts.values()):
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the freed pages are reused; the WAL need not stay big
    return Pruned(journal=counts["journal"], applies=counts["applies"], commits=counts["commits"])


def _json(values: set[int] | set[str]) -> str:
    """A set as the JSON array sqlite's json_each reads (no limit on the number of bound values)."""
    return json.dumps(sorted(values, key=str))
