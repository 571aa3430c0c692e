"""The control node's memory: a sqlite journal of steps, lane records, applies.

Every step is written before it runs, so a daemon killed mid-apply can see on
restart which lane transaction was in flight and roll it back or finish it.
Lane records keep the last healthy rank specs, which is what a rollback
restores, and the fingerprint that failed, which is not retried.

The CLI's writes fail with TransientError when the disk refuses them. The
daemon opens the store with `hold_writes`: a refused write waits in memory,
in order (`reconciler.store.held`), reads of lanes and commits see it, and the
daemon starts no new work until `flush()` has written it out.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlite_utils

from reconciler.errors import TransientError
from reconciler.logsetup import redact
from reconciler.store.held import HeldWrites
from reconciler.store.jsoncolumns import JsonColumns, text_key
from reconciler.store.lanerecord import JSON_LANE_FIELDS, LaneRecord, record_from_row, row_from_fields
from reconciler.store.schema import migrate
from reconciler.store.sqlite import durable, open_db

SCHEMA_VERSION = 1


class Store:
    """sqlite-utils over one file; one writer (the daemon or one CLI apply)."""

    def __init__(self, path: str | Path, *, hold_writes: bool = False) -> None:
        self.path = Path(path)
        self.opened = time.time()
        """When this process opened the journal: a lane operation recorded before it is not in flight."""
        self.db = open_db(self.path)
        self._migrate()
        self.held = HeldWrites(self.path) if hold_writes else None
        # Journal rows written late get their id late: a held row is known by a provisional (negative) id.
        self._provisional = itertools.count(-1, -1)
        self._ids: dict[int, int] = {}
        self._held_lanes: dict[str, dict[str, Any]] = {}
        self._held_commits: dict[str, dict[str, Any]] = {}
        self._decoded: dict[str, tuple[dict[str, Any], LaneRecord]] = {}
        """Each lane's last record, by its row's key (`text_key` of each column)."""
        self._columns = JsonColumns()

    def close(self) -> None:
        self.db.conn.close()

    def _migrate(self) -> None:
        migrate(self.db)

    def _write(self, fn: Callable[[], object]) -> bool:
        """Write now; False when the write is held for later (daemon), TransientError when refused (CLI)."""
        if self.held is not None:

            def call() -> None:
                fn()

            written = self.held.run(call)
            if not self.held:
                self._held_lanes.clear()
                self._held_commits.clear()
            return written
        try:
            fn()
        except sqlite3.OperationalError as exc:
            raise TransientError(f"cannot write the journal {self.path}: {exc}") from exc
        return True

    # -- the disk's health (daemon) --------------------------------------------

    @property
    def problem(self) -> str | None:
        """Why writes are held (the disk is full, read-only, failing), or None."""
        return self.held.problem if self.held is not None else None

    @property
    def held_writes(self) -> int:
        return len(self.held) if self.held is not None else 0

    @property
    def problem_since(self) -> float | None:
        return self.held.since if self.held is not None else None

    def flush(self) -> bool:
        """Write out what is held; True when the store is up to date on disk."""
        if self.held is None:
            return True
        done = self.held.flush()
        if done:
            self._held_lanes.clear()
            self._held_commits.clear()
        return done

    def writable(self, owner: str) -> bool:
        """Flush, then prove the disk takes a write now (a heartbeat row); False says `problem`.

        Without `hold_writes` a refused write raises TransientError, as every write of the CLI's store does.
        """
        # Table `meta` is made by this first upsert, not at open: opening must not need a write (a full disk).
        row = {"key": f"heartbeat:{owner}", "value": json.dumps({"owner": owner, "time": time.time()})}

        def beat() -> None:
            self.db.table("meta").upsert(row, pk="key")

        if self.held is None:
            self._write(beat)
            return True
        if self.held.probe(beat):
            self._held_lanes.clear()
            self._held_commits.clear()
            return True
        return False

    # -- journal ---------------------------------------------------------------

    def new_run(self) -> str:
        return uuid.uuid4().hex[:12]

    def step_started(self, run: str, lane: str, commit: str, seq: int, kind: str, detail: dict[str, Any]) -> int:
        """The step's journal id: provisional (negative) while the row is held, which step_finished accepts."""
        provisional = next(self._provisional)
        row = {
            "run": run,
            "lane": lane,
            "commit": commit,
            "seq": seq,
            "kind": kind,
            "detail": json.dumps(detail, default=str),
            "state": "started",
            "started": time.time(),
        }

        def write() -> None:
            with durable(self.db):
                self._ids[provisional] = int(self.db.table("journal").insert(row).last_pk or 0)

        if self._write(write):
            return self._ids.pop(provisional)
        return provisional

    def step_finished(self, step_id: int, *, error: str | None = None) -> None:
        fields = {"state": "failed" if error else "done", "finished": time.time(), "error": _clean(error)}

        def write() -> None:
            with durable(self.db):
                self.db.table("journal").update(self._ids.pop(step_id, step_id), fields)

        self._write(write)

    def in_flight(self) -> list[dict[str, Any]]:
        """Steps started and never finished: a transaction a killed process left behind."""
        return list(self.db.table("journal").rows_where("state = 'started'", order_by="id"))

    def close_in_flight(self, lane: str, note: str) -> None:
        self._write(
            lambda: self.db.execute(
                "update journal set state = 'abandoned', finished = ?, error = ? where lane = ? and state = 'started'",
                [time.time(), note, lane],
            )
        )

    def journal(self, lane: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        where, args = ("lane = ?", [lane]) if lane else (None, [])
        return list(self.db.table("journal").rows_where(where, args, order_by="id desc", limit=limit))

    # -- lanes -----------------------------------------------------------------

    def _lane_rows(self, name: str | None = None) -> dict[str, dict[str, Any]]:
        """Rows of `lanes` by name (one, or all), read with plain SQL: sqlite-utils' `get` asks the table's
        columns and primary key of sqlite first (two PRAGMAs per call), which at 250 lanes read a few times
        each cycle was most of the store's share of a no-op resync."""
        where, args = (" where name = ?", [name]) if name is not None else ("", [])
        cursor = self.db.conn.execute(f"select * from lanes{where}", args)  # noqa: S608 - no outside text in it
        columns = [d[0] for d in cursor.description]
        return {row["name"]: row for row in (dict(zip(columns, values, strict=True)) for values in cursor.fetchall())}

    def _record(self, row: dict[str, Any]) -> LaneRecord:
        """The row as a LaneRecord, decoded once per change of the row: a resync reads each lane's record
        several times (the plan, the status, the retries, its own observation), and decoding its JSON
        columns (the healthy specs above all) each time was most of what the store cost a no-op resync. A
        record is a frozen value its readers never change, so one decoded record serves them all. A row
        written again with its JSON unchanged (each cycle writes each lane's row) keeps its decoded JSON
        (`reconciler.store.jsoncolumns`, for the daemon's RSS)."""
        name = row["name"]
        key = {column: text_key(value) if isinstance(value, str) else value for column, value in row.items()}
        kept = self._decoded.get(name)
        if kept is not None and kept[0] == key:
            return kept[1]
        decoded: dict[str, Any] = {}
        for column in JSON_LANE_FIELDS:
            if text := row.get(column):
                decoded[column] = self._columns.decode(name, column, text)
        rec = record_from_row(row, decoded)
        self._decoded[name] = (key, rec)  # the row's key, not its texts: 250 lanes' healthy specs are 1.9 MB
        return rec

    def lane(self, name: str) -> LaneRecord | None:
        row = self._lane_rows(name).get(name, {})
        row.update(self._held_lanes.get(name, {}))
        return self._record({"name": name, **row}) if row else None

    def lanes(self) -> list[LaneRecord]:
        rows = self._lane_rows()  # one query for all, not one per lane
        for name, held in self._held_lanes.items():
            rows.setdefault(name, {"name": name}).update(held)
        for gone in set(self._decoded) - set(rows):  # kept for lanes that still have a row, no more
            del self._decoded[gone]
        self._columns.keep_only(set(rows))
        return [self._record(rows[n]) for n in sorted(rows)]

    def update_lane(self, name: str, **fields: Any) -> None:
        """The row write under the lane writer (`reconciler.store.lanewriter`), the only code that calls it; tests
        seed journals with it."""
        row = row_from_fields(name, time.time(), fields)
        # Plain SQL for the same upsert: sqlite-utils' reads the table's schema first, at every one of the
        # 250 rows a resync writes. Column names are lanes' own (LANE_COLUMNS), never outside text.
        names = ", ".join(f'"{c}"' for c in row)
        sets = ", ".join(f'"{c}" = excluded."{c}"' for c in row if c != "name")
        sql = f"insert into lanes ({names}) values ({', '.join('?' * len(row))}) on conflict(name) do update set {sets}"  # noqa: S608
        if not self._write(lambda: self.db.conn.execute(sql, list(row.values()))):
            self._held_lanes.setdefault(name, {}).update(row)

    def failed_fingerprints(self) -> dict[str, str]:
        return {r.name: r.failed_fingerprint for r in self.lanes() if r.failed_fingerprint}

    def ready_fingerprints(self) -> dict[str, str]:
        """lane -> the fingerprint whose readiness was last observed (its gate passed)."""
        return {r.name: r.fingerprint for r in self.lanes() if r.fingerprint}

    def retry_schedule(self) -> dict[str, tuple[str, float]]:
        """lane -> (fingerprint, epoch s) for specs waiting out a backoff after a transient failure.

        Read after every operation's end (`daemon/lookagain.py`): the two columns of the rows that have them,
        not every lane's whole record (250 operations of a first convergence each read and keyed all 250
        rows, about 1.5 s of the daemon's CPU at 1,000 hosts)."""
        cursor = self.db.conn.execute(
            "select name, retry_fingerprint, retry_at from lanes where retry_fingerprint is not null"
        )
        pairs = {name: (fingerprint, at) for name, fingerprint, at in cursor.fetchall()}
        for name, held in self._held_lanes.items():  # rows the journal could not take yet: as they will be
            fingerprint, at = pairs.get(name, (None, None))
            pairs[name] = (held.get("retry_fingerprint", fingerprint), held.get("retry_at", at))
        return {name: (fp, at) for name, (fp, at) in pairs.items() if fp and at}

    def clear_failed(self, name: str) -> bool:
        """`lanes retry`: the condemned spec, and any backoff, no longer hold the lane back (as a `Retried` event
        through the one writer of lane state, `reconciler.store.lanewriter`)."""
        from reconciler.store.lanewriter import retry  # the writer reads and writes through this class

        return retry(self, name)

    # -- commits ---------------------------------------------------------------

    def record_commit(self, sha: str, outcome: str, detail: dict[str, Any]) -> None:
        """What the daemon decided about a commit: applied, denied, invalid, refused, failed."""
        row = {"sha": sha, "outcome": outcome, "detail": json.dumps(detail, default=str), "time": time.time()}

        def write() -> None:
            with durable(self.db):
                self.db.table("commits").upsert(row, pk="sha")

        if not self._write(write):
            self._held_commits[sha] = row

    def commit_outcome(self, sha: str) -> dict[str, Any] | None:
        row = self._held_commits.get(sha)
        if row is None:
            try:
                row = self.db.table("commits").get(sha)
            except sqlite_utils.db.NotFoundError:
                return None
        return {
            "sha": row["sha"],
            "outcome": row["outcome"],
            "detail": json.loads(row["detail"] or "{}"),
            "time": row["time"],
        }

    def latest_commit(self) -> dict[str, Any] | None:
        """The newest decision about a commit (what `lanes status` shows when it is a refusal)."""
        if self._held_commits:
            sha = max(self._held_commits.values(), key=lambda r: r["time"])["sha"]
            return self.commit_outcome(str(sha))
        if "commits" not in self.db.table_names():
            return None
        rows = list(self.db.execute("select sha from commits order by time desc limit 1").fetchall())
        return self.commit_outcome(str(rows[0][0])) if rows else None

    # -- applies ---------------------------------------------------------------

    def record_apply(
        self,
        run: str,
        lane: str,
        commit: str,
        fingerprint: str | None,
        result: str,
        error: str | None,
        started: float,
        timings: dict[str, float],
        logs: dict[str, str] | None = None,
        *,
        cause: str | None = None,
        drift: list[dict[str, str]] | None = None,
    ) -> None:
        row = {
            "run": run,
            "lane": lane,
            "commit": commit,
            "fingerprint": fingerprint,
            "result": result,
            "error": _clean(error),
            "started": started,
            "finished": time.time(),
            "timings": json.dumps(timings),
            "logs": json.dumps({k: redact(v) for k, v in (logs or {}).items()}),
            "cause": cause,
            "drift": json.dumps(drift) if drift else None,
        }

        def write() -> None:
            with durable(self.db):
                self.db.table("applies").insert(row)

        self._write(write)

    def applies(self, lane: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        where, args = ("lane = ?", [lane]) if lane else (None, [])
        return list(self.db.table("applies").rows_where(where, args, order_by="id desc", limit=limit))

    def failure_of(self, lane: str, fingerprint: str | None) -> str | None:
        """What the lane's spec `fingerprint` last failed with (its latest failed or rolled-back apply), or None."""
        if not fingerprint:
            return None
        rows = self.db.table("applies").rows_where(
            "lane = ? and fingerprint = ? and result in ('failed', 'rolled-back') and error is not null",
            [lane, fingerprint],
            order_by="id desc",
            limit=1,
            select="error",
        )
        return next((str(row["error"]) for row in rows), None)


__all__ = ["LaneRecord", "Store"]


def _clean(error: str | None) -> str | None:
    """An error as stored: remote output can quote a secret, which never reaches sqlite (issue 14)."""
    return redact(error) if error else error
