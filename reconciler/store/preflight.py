"""The engines' own verdicts on lanes' arguments, per image digest and argv (`execute/preflight.py`).

An image's parser answers the same for the same arguments every time, so a verdict is kept for good:
the daemon asks an image once per (engine, digest, argv), and `lanes check` says a lane's flags were
judged by its image when a verdict is here. Only verdicts are kept (accepted, refused); a run that
judged nothing (no python3, killed by its cap) is asked again at the next change. The table is made on
first write, never at open (opening must not need a write), and read without a write (`lanes check`
opens the file read-only).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only a type here: `read_cached` (lanes check) needs no sqlite-utils
    from reconciler.store.journal import Store

PREFLIGHTS = "preflights"  # the SQL below names it literally
COLUMNS: dict[str, type] = {
    "key": str,
    "engine": str,
    "digest": str,
    "image": str,
    "argv": str,
    "outcome": str,
    "message": str,
    "stderr": str,
    "host": str,
    "lane": str,
    "judged_at": float,
}


@dataclass(frozen=True)
class CachedVerdict:
    key: str
    outcome: str
    """accepted or refused."""
    message: str
    host: str
    lane: str
    image: str
    judged_at: float


def _from_row(row: Sequence[object]) -> CachedVerdict:
    key, outcome, message, host, lane, image, judged_at = row
    return CachedVerdict(
        key=str(key),
        outcome=str(outcome),
        message=str(message or ""),
        host=str(host or ""),
        lane=str(lane or ""),
        image=str(image or ""),
        judged_at=float(judged_at or 0.0),  # type: ignore[arg-type]
    )


_SELECT = "select key, outcome, message, host, lane, image, judged_at from preflights where key = ?"


def cached(store: Store, key: str) -> CachedVerdict | None:
    if PREFLIGHTS not in store.db.table_names():
        return None
    row = store.db.execute(_SELECT, [key]).fetchone()
    return _from_row(row) if row else None


def read_cached(path: Path, keys: Sequence[str]) -> dict[str, CachedVerdict]:
    """Verdicts from a journal file opened read-only (`lanes check`); none when there is no file or table."""
    if not path.is_file() or not keys:
        return {}
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error:
        return {}
    try:
        found = {}
        for key in keys:
            row = conn.execute(_SELECT, [key]).fetchone()
            if row:
                found[key] = _from_row(row)
        return found
    except sqlite3.Error:  # an older journal without the table, or a file that is not one
        return {}
    finally:
        conn.close()


def record(
    store: Store,
    *,
    key: str,
    engine: str,
    digest: str,
    image: str,
    argv: str,
    outcome: str,
    message: str,
    stderr: str,
    host: str,
    lane: str,
) -> None:
    if outcome not in ("accepted", "refused"):
        raise ValueError(f"only verdicts are kept, not {outcome!r}")
    row = {
        "key": key,
        "engine": engine,
        "digest": digest,
        "image": image,
        "argv": argv,
        "outcome": outcome,
        "message": message,
        "stderr": stderr,
        "host": host,
        "lane": lane,
        "judged_at": time.time(),
    }

    def write() -> None:
        table = store.db.table(PREFLIGHTS)
        table.create(COLUMNS, pk="key", if_not_exists=True)
        table.upsert(row, pk="key")

    store._write(write)
