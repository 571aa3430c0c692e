"""`lanes daemon` with cProfile on: one stats file per stretch between two cycle starts (bench only).

    python bench/profiled_daemon.py PROFILE_DIR --config daemon.toml

`bench/scale.py --profile DIR` starts the daemon through this. The profiler runs from the daemon's start;
at the start of each cycle the stats gathered since the previous start are written to
`PROFILE_DIR/stretch-N.prof` and a new profiler begins, so a file holds one whole cycle and what the
daemon did after it until the next (the gateway's kick, the status, the idle wake-ups): the CPU
`bench/scale.py` counts for that cycle. cProfile sees the main thread only (the fetch's thread and
sqlite's own work done in threads are not in it) and slows what it sees by about 1.5-2x, so the files say
where the time goes, not how much there is. Read one with
`python -c "import pstats; pstats.Stats('stretch-5.prof').sort_stats('cumulative').print_stats(40)"`.

With `--memory` (`bench/scale.py --profile DIR --memory`) tracemalloc runs instead (one frame, as
bench/cycle_memory.py says why): at each cycle start `PROFILE_DIR/memory-N.snap` holds a snapshot of
what the daemon holds then (`tracemalloc.Snapshot.load`), and `memory-N.txt` the traced total, its peak
since the previous cycle start, and the 40 allocation sites holding most. A thread also watches the traced
total every 20 ms and, each time it rises 4 MB past its highest, writes `peak.snap` and `peak.txt` the
same way: what is held at the daemon's peak, which falls between cycles (the first convergence's operations).
"""

from __future__ import annotations

import cProfile
import os
import sys
import threading
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reconciler.cli.main import app
from reconciler.daemon import service


def _write(snap: tracemalloc.Snapshot, out: Path, name: str, head: str) -> None:
    snap.dump(str(out / f"{name}.snap"))
    lines = [head, *(str(stat) for stat in snap.statistics("lineno")[:40])]
    (out / f"{name}.txt").write_text("\n".join(lines) + "\n")


_SNAPSHOTTING = threading.Lock()
"""Held while a cycle's snapshot is taken and written: the snapshot itself is traced (about 30 MB at 1,000
hosts), and the peak watcher must not take it for the daemon's own peak."""


def _watch_peak(out: Path) -> None:
    """Snapshot what is held each time the traced total climbs 4 MB past its highest (a daemon thread: it gets
    the GIL at every switch interval, so a peak inside one long synchronous stretch of the loop is seen too)."""
    highest = 0
    while True:
        time.sleep(0.02)
        with _SNAPSHOTTING:
            now, _ = tracemalloc.get_traced_memory()
            if now > highest + (4 << 20):
                highest = now
                _write(tracemalloc.take_snapshot(), out, "peak", f"traced {now / 2**20:.1f} MB at the highest seen")


def traced(out: Path) -> None:
    """tracemalloc from the start; a snapshot and its top sites at each cycle start, and at the peak."""
    tracemalloc.start(int(os.environ.get("LANES_BENCH_TRACE_FRAMES", "1")))
    threading.Thread(target=_watch_peak, args=(out,), daemon=True, name="peak-watch").start()
    original = service.Daemon.cycle
    count = [0]

    async def cycle(self: service.Daemon, reasons: set[str]) -> None:
        now, peak = tracemalloc.get_traced_memory()
        head = f"traced {now / 2**20:.1f} MB, peak since the last cycle start {peak / 2**20:.1f} MB"
        with _SNAPSHOTTING:
            _write(tracemalloc.take_snapshot(), out, f"memory-{count[0]}", head)
        count[0] += 1
        tracemalloc.reset_peak()
        await original(self, reasons)

    service.Daemon.cycle = cycle  # type: ignore[method-assign]


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    if sys.argv[2] == "--memory":
        del sys.argv[2]
        traced(out)
        sys.argv = ["lanes", *sys.argv[2:]]
        app()
        return
    state = {"profiler": cProfile.Profile(), "n": 0}
    original = service.Daemon.cycle

    async def cycle(self: service.Daemon, reasons: set[str]) -> None:
        profiler = state["profiler"]
        assert isinstance(profiler, cProfile.Profile)
        profiler.disable()
        profiler.dump_stats(out / f"stretch-{state['n']}.prof")
        state["n"] = int(str(state["n"])) + 1
        fresh = cProfile.Profile()
        state["profiler"] = fresh
        fresh.enable()
        await original(self, reasons)

    service.Daemon.cycle = cycle  # type: ignore[method-assign]
    profiler = state["profiler"]
    assert isinstance(profiler, cProfile.Profile)
    profiler.enable()
    sys.argv = ["lanes", *sys.argv[2:]]
    app()


if __name__ == "__main__":
    main()
