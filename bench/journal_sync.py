"""What a durable journal step costs: step records written with synchronous=NORMAL and FULL (WAL).

A lane transaction writes two rows per step (started, finished), each its own transaction, through
`reconciler.store.journal.Store`. With `PRAGMA synchronous=NORMAL` in WAL mode SQLite syncs only at
checkpoints, so a committed step can be lost to a power cut; with FULL the WAL is synced at every
commit (https://www.sqlite.org/pragma.html#pragma_synchronous, https://www.sqlite.org/wal.html).
The store writes step records, applies and commit decisions with FULL (`store.sqlite.durable`) and the
rest with NORMAL. This script times `steps` steps through the real Store, once with its durable writes
as shipped (FULL) and once with them set to NORMAL (as before issue 14), and a lane-record upsert (what
every cycle writes per lane, NORMAL), in a directory on the disk you name (default: a temporary
directory under the current one, which is where `.lanes/lanes.db` lives by default).

    .venv/bin/python bench/journal_sync.py [--steps 500] [--dir PATH] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from reconciler.store import sqlite
from reconciler.store.journal import Store


def time_steps(db: Path, mode: str, steps: int) -> list[float]:
    sqlite.DURABLE_SYNCHRONOUS = mode
    store = Store(db)
    try:
        run = store.new_run()
        out = []
        for seq in range(steps):
            t0 = time.perf_counter()
            step = store.step_started(run, "bench-lane", "c0ffee", seq, "start", {"describe": "start x@h"})
            store.step_finished(step)
            out.append(time.perf_counter() - t0)
        return out
    finally:
        store.close()
        sqlite.DURABLE_SYNCHRONOUS = "FULL"


def time_upserts(db: Path, count: int) -> list[float]:
    store = Store(db)
    try:
        out = []
        for i in range(count):
            t0 = time.perf_counter()
            store.update_lane(f"lane-{i % 250}", health="healthy", last_error=None)
            out.append(time.perf_counter() - t0)
        return out
    finally:
        store.close()


def _figures(times: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(times) * 1000, 3),
        "p95_ms": round(sorted(times)[int(len(times) * 0.95) - 1] * 1000, 3),
        "mean_ms": round(statistics.fmean(times) * 1000, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--dir", type=Path, default=None, help="where the sqlite files go (default: under .)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(dir=args.dir or Path.cwd(), prefix="journal-sync-") as tmp:
        for mode in ("NORMAL", "FULL"):
            figures[mode] = _figures(time_steps(Path(tmp) / f"{mode.lower()}.db", mode, args.steps))
        upsert = _figures(time_upserts(Path(tmp) / "lanes.db", args.steps))
    added = round(figures["FULL"]["median_ms"] - figures["NORMAL"]["median_ms"], 3)
    if args.json:
        out = {"steps": args.steps, "modes": figures, "full_adds_ms_per_step": added, "lane_upsert": upsert}
        print(json.dumps(out))
        return
    print(f"{args.steps} journal steps (2 writes each), per step:")
    for mode, f in figures.items():
        print(f"  synchronous={mode:<6}  median {f['median_ms']:.3f} ms  p95 {f['p95_ms']:.3f} ms")
    print(f"  FULL adds {added:.3f} ms per step (median)")
    print(f"lane record upsert (every cycle, per lane; NORMAL): median {upsert['median_ms']:.3f} ms")


if __name__ == "__main__":
    main()
