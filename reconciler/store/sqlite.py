"""One way to open the control node's sqlite file, for every table owner.

The journal, the upstream watch and the CLI share one file; WAL lets a
`lanes status` read while the daemon writes.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import sqlite_utils


def open_db(path: Path) -> sqlite_utils.Database:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=10, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return sqlite_utils.Database(conn)
