"""Change windows: open or closed at an instant, and when they open next, against instants worked out by hand.

The calendar facts the expectations rest on: 1 Dec 2026 is a Tuesday (1 Jan 2026 is a Thursday, and
334 days later is 47 weeks and 5 days on); Berlin keeps CET (UTC+1) in December and moves to CEST
(UTC+2) at 01:00 UTC on the last Sunday of March, 29 Mar 2026 (31 Mar 2026 is a Tuesday).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from reconciler.errors import InputError
from reconciler.plan.windows import overrides_windows
from reconciler.spec.load import load_policies
from reconciler.spec.windows import ChangeWindow, WindowsFile, lane_hold, window_state
from tests.support.example import repo_files

pytestmark = pytest.mark.timeout(10)

NIGHTS = ChangeWindow(cron="0 22 * * mon-fri", timezone="Europe/Berlin", duration_minutes=180)
"""22:00 to 01:00 Berlin time on weeknights: 21:00 to 00:00 UTC in December."""


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[arg-type, misc]


@pytest.mark.parametrize(
    ("at", "is_open", "closes", "opens"),
    [
        # Tuesday noon UTC: closed; tonight's 22:00 CET is 21:00 UTC.
        (utc(2026, 12, 1, 12, 0), False, None, utc(2026, 12, 1, 21, 0)),
        # The opening instant itself is inside; it closes three hours later.
        (utc(2026, 12, 1, 21, 0), True, utc(2026, 12, 2, 0, 0), None),
        (utc(2026, 12, 1, 23, 59, 59), True, utc(2026, 12, 2, 0, 0), None),
        # The closing instant is outside: the next opening is Wednesday's.
        (utc(2026, 12, 2, 0, 0), False, None, utc(2026, 12, 2, 21, 0)),
        # Friday night's window runs past midnight into Saturday.
        (utc(2026, 12, 4, 23, 30), True, utc(2026, 12, 5, 0, 0), None),
        # Saturday: no window until Monday 7 Dec, 22:00 CET.
        (utc(2026, 12, 5, 12, 0), False, None, utc(2026, 12, 7, 21, 0)),
    ],
)
def test_weeknight_window(at: datetime, is_open: bool, closes: datetime | None, opens: datetime | None) -> None:
    state = window_state("nights", NIGHTS, at)
    assert (state.open, state.closes, state.opens) == (is_open, closes, opens)


def test_a_window_follows_its_zone_across_the_summer_time_change() -> None:
    daily = ChangeWindow(cron="0 22 * * *", timezone="Europe/Berlin", duration_minutes=60)
    # Saturday 28 Mar: 22:00 CET is 21:00 UTC; Sunday 29 Mar: 22:00 CEST is 20:00 UTC.
    assert window_state("d", daily, utc(2026, 3, 28, 12, 0)).opens == utc(2026, 3, 28, 21, 0)
    assert window_state("d", daily, utc(2026, 3, 29, 12, 0)).opens == utc(2026, 3, 29, 20, 0)
    assert window_state("d", daily, utc(2026, 3, 29, 20, 30)).open


def test_utc_window_with_a_minute_and_a_day_of_month() -> None:
    monthly = ChangeWindow(cron="30 6 1 * *", timezone="UTC", duration_minutes=30)
    assert window_state("m", monthly, utc(2026, 12, 1, 6, 45)).closes == utc(2026, 12, 1, 7, 0)
    assert window_state("m", monthly, utc(2026, 12, 1, 7, 0)).opens == utc(2027, 1, 1, 6, 30)


LABELLED = {"role": "production", "rack": "bench-a"}


def windows(**more: ChangeWindow) -> WindowsFile:
    return WindowsFile(windows={"nights": NIGHTS, **more})


def test_a_lane_under_no_window_is_never_held() -> None:
    assert lane_hold(windows(), "eugr", None, [LABELLED], utc(2026, 12, 1, 12, 0)) is None


def test_a_window_holds_lanes_by_name_by_host_label_and_by_the_lane_files_reference() -> None:
    at = utc(2026, 12, 1, 12, 0)
    by_name = ChangeWindow(cron="0 3 * * *", timezone="UTC", duration_minutes=60, lanes=("prod",))
    by_label = ChangeWindow(cron="0 4 * * *", timezone="UTC", duration_minutes=60, host_labels={"role": "production"})
    wf = windows(early=by_name, labelled=by_label)
    # prod is named by 'early' (next 03:00 UTC, Wednesday) and its host is labelled: 'labelled' opens at 04:00.
    hold = lane_hold(wf, "prod", None, [{"role": "spare"}, LABELLED], at)
    assert hold is not None
    assert (hold.windows, hold.until) == (("early", "labelled"), utc(2026, 12, 2, 3, 0))
    # Another lane on production hosts: only the label holds it.
    other = lane_hold(wf, "other", None, [LABELLED], at)
    assert other is not None and (other.windows, other.until) == (("labelled",), utc(2026, 12, 2, 4, 0))
    # A label must match in full (key and value) on one host.
    assert lane_hold(wf, "other", None, [{"role": "spare", "rack": "bench-a"}], at) is None
    # The lane file names 'nights': it opens tonight, 21:00 UTC, before the others.
    named = lane_hold(wf, "prod", "nights", [LABELLED], at)
    assert named is not None and (named.windows, named.until) == (("early", "labelled", "nights"), utc(2026, 12, 1, 21))
    assert "held until 2026-12-01T21:00:00Z" in named.describe()


def test_one_open_window_lets_the_change_go() -> None:
    always_now = ChangeWindow(cron="0 12 * * *", timezone="UTC", duration_minutes=60, lanes=("prod",))
    assert lane_hold(windows(noon=always_now), "prod", "nights", [], utc(2026, 12, 1, 12, 30)) is None


def test_a_window_the_lane_names_but_nobody_defined_holds_the_change_and_says_why() -> None:
    hold = lane_hold(windows(), "prod", "nigths", [], utc(2026, 12, 1, 12, 0))
    assert hold is not None and hold.until is None and hold.missing == ("nigths",)
    assert "'nigths', which policies/windows.yaml does not define" in hold.describe()


def test_a_window_that_never_opens_again_holds_without_an_end() -> None:
    # 30 February never comes.
    never = ChangeWindow(cron="0 0 30 2 *", timezone="UTC", duration_minutes=60, lanes=("prod",))
    hold = lane_hold(WindowsFile(windows={"never": never}), "prod", None, [], utc(2026, 12, 1))
    assert hold is not None and hold.until is None
    assert "never opens again" in hold.describe()


@pytest.mark.parametrize(
    ("cron", "zone", "words"),
    [
        ("0 22 * * 1-5", "UTC", "write days by name"),
        ("0 22 * *", "UTC", "has 4 fields"),
        ("0 25 * * *", "UTC", "higher than the maximum"),
        ("0 22 * * mon", "Europe/Berlinn", "unknown time zone"),
    ],
)
def test_a_window_that_cannot_be_read_is_refused(cron: str, zone: str, words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        ChangeWindow(cron=cron, timezone=zone, duration_minutes=60)


def test_the_policy_file_is_optional_and_checked_when_present() -> None:
    files = repo_files()
    assert "production-nights" in load_policies(files).windows.windows
    del files["policies/windows.yaml"]
    assert load_policies(files).windows.windows == {}
    numbered = b"windows:\n  w:\n    cron: '0 22 * * 1'\n    timezone: UTC\n    duration_minutes: 5\n"
    files["policies/windows.yaml"] = numbered
    with pytest.raises(InputError, match="write days by name"):
        load_policies(files)


@pytest.mark.parametrize(
    ("message", "override"),
    [
        ("prod: bump\n\nLanes-Change-Window: now\n", True),
        ("prod: bump\n\nlanes-change-window:  NOW", True),
        ("prod: bump\n\nLanes-Change-Window: later\n", False),
        ("prod: bump, Lanes-Change-Window now", False),
        ("", False),
    ],
)
def test_the_commit_trailer_override(message: str, override: bool) -> None:
    assert overrides_windows(message) is override
