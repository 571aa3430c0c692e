"""A disk that fills up: a real tmpfs of its own, taken to its last byte, under a sqlite file.

A write sqlite cannot place fails with SQLITE_FULL ("database or disk is full"), exactly as on a control
node whose disk filled. Mounting needs root (CI runs as root); elsewhere the test is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(path: Path, size: str = "16m") -> Iterator[Path]:
    """A tmpfs of its own at `path` (a real file system that really fills up); unmounted at the end."""
    path.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "lanes-faults", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"mounting a tmpfs needs root (CI runs as root): {result.stderr.strip() or result.returncode}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def fill(disk: Path) -> Path:
    """Take every free byte of the file system at `disk`; returns the filler file (unlink it to free it)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for chunk in (1 << 20, 4096, 1):
            block = b"\0" * chunk
            while True:
                try:
                    os.write(fd, block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return filler


def checkpoint_wal(db: Path) -> None:
    """Fold the WAL into the database and truncate it, so the writer's next write needs new blocks.

    Without it a write may land in WAL space the file system already gave out, and a full disk would
    show only some writes later: real, but not a test that fails at a known point.
    """
    with contextlib.closing(sqlite3.connect(db, timeout=10)) as conn:
        for _ in range(200):
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy == 0:
                return
            time.sleep(0.05)
    raise AssertionError(f"could not checkpoint {db}: the daemon kept it busy")
