"""One way to open the control node's sqlite file, for every table owner.

The journal, the upstream watch and the CLI share one file; WAL lets a
`lanes status` read while the daemon writes.

Durability: every step is journaled before it runs, and a restart after a crash plans from that record,
so a committed row must survive a power cut, not only a killed process. In WAL mode
`synchronous=NORMAL` syncs the WAL only at checkpoints: "WAL mode is always consistent with
synchronous=NORMAL, but WAL mode does lose durability. A transaction committed in WAL mode with
synchronous=NORMAL might roll back following a power loss or system crash"; with `FULL`, "an
additional sync operation of the WAL file happens after each transaction commit", which "helps ensure
that transactions are durable across a power loss" (https://www.sqlite.org/pragma.html#pragma_synchronous).
So FULL: one fsync of the WAL per commit, measured by `bench/journal_sync.py` (bench/README.md).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import sqlite_utils

SYNCHRONOUS = "FULL"
"""Every commit's WAL frames reach the disk before the commit returns (see above)."""


def open_db(path: Path) -> sqlite_utils.Database:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=10, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={SYNCHRONOUS}")
    return sqlite_utils.Database(conn)
