"""Progress of a long byte-moving job on stderr: bytes done of the total, the rate, the time left.

Hashing a 250 GB checkpoint or copying it to a Spark takes many minutes; a person needs to see that
it moves and when it will end. In a terminal one line is rewritten in place a few times a second; in
a pipe or a log (where `\\r` makes a mess) one line is printed every `log_every_s` seconds, so a log
says how far a run got when it stopped. The rate is over the last `window_s` seconds (a disk that
slows down shows it), the time left is what remains at that rate.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

GB = 10**9


@dataclass(frozen=True)
class Rate:
    """One reading: bytes done of the total, bytes per second lately, seconds left at that rate."""

    done: int
    total: int
    rate_bps: float
    eta_s: float | None


def human_bytes(value: float) -> str:
    """Decimal units as disks and rsync count them: 252.4 GB, 731 MB."""
    for unit, size in (("TB", 10**12), ("GB", GB), ("MB", 10**6), ("kB", 10**3)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def human_seconds(value: float) -> str:
    value = max(0.0, value)
    if value < 60:
        return f"{value:.0f} s"
    minutes, seconds = divmod(int(value + 0.5), 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class RateMeter:
    """Bytes over time, thread-safe: workers `add`, a printer reads `reading()`."""

    def __init__(self, total: int, *, window_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self.window_s = window_s
        self.clock = clock
        self.started = clock()
        self._done = 0
        self._lock = threading.Lock()
        self._samples: deque[tuple[float, int]] = deque([(self.started, 0)])

    def add(self, count: int) -> None:
        with self._lock:
            self._done += count

    def reading(self) -> Rate:
        now = self.clock()
        with self._lock:
            done = self._done
            self._samples.append((now, done))
            while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
                self._samples.popleft()
            then, before = self._samples[0]
        span = now - then
        rate = (done - before) / span if span > 0 else 0.0
        left = max(self.total - done, 0)
        eta = left / rate if rate > 0 else (0.0 if left == 0 else None)
        return Rate(done=done, total=self.total, rate_bps=rate, eta_s=eta)

    def elapsed(self) -> float:
        return self.clock() - self.started


def describe(label: str, rate: Rate) -> str:
    share = 100.0 * rate.done / rate.total if rate.total else 100.0
    eta = human_seconds(rate.eta_s) if rate.eta_s is not None else "unknown"
    return (
        f"{label}: {human_bytes(rate.done)} of {human_bytes(rate.total)} ({share:.0f} %), "
        f"{human_bytes(rate.rate_bps)}/s, {eta} left"
    )


class ByteProgress:
    """Prints a `RateMeter` on `stream` from a background thread until stopped (use it in a `with`)."""

    def __init__(
        self,
        meter: RateMeter,
        label: str,
        stream: TextIO,
        *,
        live: bool | None = None,
        refresh_s: float = 0.25,
        log_every_s: float = 5.0,
    ) -> None:
        self.meter = meter
        self.label = label
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self.period = refresh_s if self.live else log_every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="byte-progress", daemon=True)
        self._width = 0

    def __enter__(self) -> ByteProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self.live and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self._show(describe(self.label, self.meter.reading()))

    def _show(self, line: str) -> None:
        if self.live:
            pad = max(self._width - len(line), 0)
            self._width = len(line)
            self.stream.write("\r" + line + " " * pad)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
