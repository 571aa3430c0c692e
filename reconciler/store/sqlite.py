"""One way to open the control node's sqlite file, for every table owner.

The journal, the upstream watch and the CLI share one file; WAL lets a
`lanes status` read while the daemon writes.

Durability: every step is journaled before it runs, and a restart after a crash plans from that record,
so what the journal says was done must survive a power cut, not only a killed process. In WAL mode
`synchronous=NORMAL` syncs the WAL only at checkpoints: "WAL mode is always consistent with
synchronous=NORMAL, but WAL mode does lose durability. A transaction committed in WAL mode with
synchronous=NORMAL might roll back following a power loss or system crash"; with `FULL`, "an
additional sync operation of the WAL file happens after each transaction commit", which "helps ensure
that transactions are durable across a power loss" (https://www.sqlite.org/pragma.html#pragma_synchronous).

So the records of what was done (journal steps, applies, commit decisions) are committed with FULL
(`durable`), and everything else (the lane records every cycle rewrites, heartbeats, the upstream cache)
with NORMAL: the WAL is one sequence, so the fsync of a durable commit also makes every commit before it
durable, a transaction's lane record included. A FULL commit costs one fsync of the WAL
(`bench/journal_sync.py`, figures in bench/README.md); NORMAL for the per-cycle writes keeps a no-op
resync of 250 lanes from paying 250 of them.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import sqlite_utils

SYNCHRONOUS = "NORMAL"
"""Ordinary writes: consistent after any crash, durable once a later FULL commit or a checkpoint syncs the WAL."""
CACHE_KIB = 256
"""sqlite's own page cache (its default is 2,000 KiB). The daemon reads the journal's lane rows whole a few
times a cycle and keeps what it decoded (`journal.py`); the pages are in the kernel's page cache anyway, and a
2 MB cache of them was 2.1 MB of the daemon's RSS at 1,000 hosts (issue 27), with no change in a no-op
resync's CPU (0.30-0.31 s) at 256 KiB."""
DURABLE_SYNCHRONOUS = "FULL"
"""Writes made with `durable`: the WAL is synced before the commit returns."""


def open_db(path: Path) -> sqlite_utils.Database:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=10, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={SYNCHRONOUS}")
    conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
    return sqlite_utils.Database(conn)


@contextlib.contextmanager
def durable(db: sqlite_utils.Database) -> Iterator[None]:
    """The writes inside commit with synchronous=FULL (each its own transaction, as the store writes)."""
    db.conn.execute(f"PRAGMA synchronous={DURABLE_SYNCHRONOUS}")
    try:
        yield
    finally:
        db.conn.execute(f"PRAGMA synchronous={SYNCHRONOUS}")
