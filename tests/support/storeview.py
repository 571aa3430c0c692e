"""What a store's sqlite file says, read through read-only connections.

A daemon (or the reconciler in the test's own process) writes the file; a test reads it next to that
writer without ever writing to it, so what it sees is only what the writer put there. A file that does
not exist yet, or has no tables yet, reads as empty.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.support.example import EUGR, PRODUCTION
from tests.support.waiting import wait_for

CONVERGE_S = 120.0  # generous: two cores, other test runs next to this one


def lane_health(db: Path, lane: str) -> tuple[str | None, str | None]:
    """A lane record's (health, applied_commit), or (None, None) while there is none."""
    if not db.exists():
        return None, None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
            row = conn.execute("select health, applied_commit from lanes where name = ?", (lane,)).fetchone()
    except sqlite3.OperationalError:
        return None, None
    return (row[0], row[1]) if row else (None, None)


class StoreView:
    """Read-only views of the store at `db` (a property or field of the class that mixes this in)."""

    db: Path

    def rows(self, sql: str, *args: object) -> list[dict[str, Any]]:
        if not self.db.exists():
            return []
        with contextlib.closing(sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)) as conn:
            conn.row_factory = sqlite3.Row
            try:
                return [dict(r) for r in conn.execute(sql, args)]
            except sqlite3.OperationalError:
                return []  # the writer has not created its tables yet

    def journal(self, lane: str, commit: str) -> list[dict[str, Any]]:
        """The lane's journaled steps toward `commit`, oldest first."""
        return self.rows("select * from journal where lane = ? and [commit] = ? order by id", lane, commit)

    def journal_has(self, lane: str, kind: str, commit: str) -> bool:
        """A step of `kind` toward `commit` was journaled (started, finished or not)."""
        return any(r["kind"] == kind for r in self.journal(lane, commit))

    def in_step(self, lane: str, kind: str) -> bool:
        """A step of `kind` of the lane is started and not finished: its writer is inside it now."""
        return bool(self.rows("select 1 from journal where lane = ? and kind = ? and state = 'started'", lane, kind))

    def unfinished_steps(self) -> list[dict[str, Any]]:
        return self.rows("select * from journal where state = 'started'")

    def applies(self, lane: str, commit: str) -> list[dict[str, Any]]:
        return self.rows("select * from applies where lane = ? and [commit] = ? order by id", lane, commit)

    def lane_row(self, lane: str) -> dict[str, Any]:
        found = self.rows("select * from lanes where name = ?", lane)
        return found[0] if found else {}

    def health(self, lane: str) -> tuple[str | None, str | None]:
        """(health, applied_commit) of the lane."""
        return lane_health(self.db, lane)

    def commit_outcome(self, sha: str) -> dict[str, Any]:
        """The commit's row with its detail parsed, or {} while there is none."""
        found = self.rows("select * from commits where sha = ?", sha)
        if not found:
            return {}
        return {**found[0], "detail": json.loads(found[0]["detail"] or "{}")}

    def outcome(self, sha: str) -> str | None:
        """What was decided about the commit (applied, denied, ...), or None."""
        return self.commit_outcome(sha).get("outcome")

    def integrity(self) -> str:
        with contextlib.closing(sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)) as conn:
            return str(conn.execute("pragma integrity_check").fetchone()[0])

    async def converged(
        self, head: str, lanes: Sequence[str] = (PRODUCTION, EUGR), timeout: float = CONVERGE_S
    ) -> None:
        """Each lane healthy at `head`, whoever deployed it."""
        await wait_for(
            lambda: all(self.health(lane) == ("healthy", head) for lane in lanes),
            timeout,
            f"{', '.join(lanes)} healthy at {head[:12]} in {self.db}",
            0.1,
        )

    async def deployed(self, head: str, lanes: Sequence[str] = (PRODUCTION, EUGR), timeout: float = CONVERGE_S) -> None:
        """Each lane deployed at `head` by this store's writer: healthy, and its apply row written (after it)."""
        await wait_for(
            lambda: all(
                self.health(lane) == ("healthy", head)
                and any(a["result"] == "applied" for a in self.applies(lane, head))
                for lane in lanes
            ),
            timeout,
            f"{', '.join(lanes)} applied and healthy at {head[:12]} in {self.db}",
            0.1,
        )
