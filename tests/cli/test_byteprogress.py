"""Progress of a byte-moving job: bytes of the total, the recent rate, the time left; in a log, a line at a time."""

from __future__ import annotations

import io
import time

import pytest

from reconciler.cli.byteprogress import ByteProgress, RateMeter, describe, human_bytes, human_seconds

pytestmark = pytest.mark.timeout(10)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_rate_is_over_the_recent_window_and_the_time_left_follows_it() -> None:
    clock = Clock()
    meter = RateMeter(1_000_000_000, window_s=10.0, clock=clock)
    clock.now += 4
    meter.add(400_000_000)  # 100 MB/s for 4 s
    first = meter.reading()
    assert (first.done, first.rate_bps) == (400_000_000, 100_000_000)
    assert first.eta_s == pytest.approx(6.0)  # 600 MB left at 100 MB/s
    clock.now += 20
    meter.add(100_000_000)  # then 5 MB/s for 20 s: the window forgets the fast start
    second = meter.reading()
    assert second.rate_bps == pytest.approx(5_000_000)
    assert second.eta_s == pytest.approx(100.0)  # 500 MB left at 5 MB/s
    assert describe("hashing", second) == "hashing: 500.0 MB of 1.0 GB (50 %), 5.0 MB/s, 1 min 40 s left"


def test_nothing_moved_yet_has_no_time_left_to_tell() -> None:
    clock = Clock()
    reading = RateMeter(10, clock=clock).reading()
    assert reading.eta_s is None and "unknown left" in describe("copy", reading)


def test_units_for_people() -> None:
    assert [human_bytes(v) for v in (999, 1_500, 252_400_000_000, 3_840_000_000_000)] == [
        "999 B",
        "1.5 kB",
        "252.4 GB",
        "3.8 TB",
    ]
    assert [human_seconds(v) for v in (5, 61, 3725)] == ["5 s", "1 min 01 s", "1 h 02 min"]


def test_in_a_pipe_a_line_is_printed_every_period_and_nothing_after_the_end() -> None:
    stream = io.StringIO()
    meter = RateMeter(100)
    with ByteProgress(meter, "hashing 2 files", stream, live=False, log_every_s=0.05):
        meter.add(50)
        time.sleep(0.3)
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 2
    assert all(line.startswith("hashing 2 files: 50 B of 100 B (50 %), ") for line in lines)
    assert "\r" not in stream.getvalue()


def test_in_a_terminal_one_line_is_rewritten_and_cleared_at_the_end() -> None:
    stream = io.StringIO()
    meter = RateMeter(100)
    with ByteProgress(meter, "copy", stream, live=True, refresh_s=0.02):
        meter.add(100)
        time.sleep(0.1)
    text = stream.getvalue()
    assert "\n" not in text and text.count("\r") >= 2 and "copy: 100 B of 100 B (100 %)" in text
    assert text.endswith("\r")
