"""Change windows (`policies/windows.yaml`): when a change that restarts a running lane may go.

A window opens at each time its cron expression names, in its own time zone, and stays open for its
duration. A lane is under the windows that name it (`lanes`), that select one of its hosts by labels
(`host_labels`), and the one its lane file names (`change_window`); a change may go while any of them is
open, else it waits for the earliest next opening. A lane under no window is never held. This is the
rule of Argo CD's "allow" sync windows (a cron schedule, a duration, a time zone; with no matching
window every sync is allowed; a manual sync may override: argo-cd.readthedocs.io, user-guide/sync_windows,
and `argocd proj windows add --manual-sync`); lanes has no deny windows.

The cron fields are parsed by APScheduler 3.x's CronTrigger (`apscheduler/triggers/cron/__init__.py`,
3.11.3), the scheduler the daemon already runs on; it is pure date arithmetic, no scheduler is started.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger
from pydantic import Field, field_validator, model_validator

from reconciler.spec.base import Name, StrictModel

# APScheduler 3.x numbers the days of the week from Monday = 0, where crontab numbers Sunday = 0
# (CronTrigger.from_crontab's docstring, 3.11.3; agronholm/apscheduler issue 286): a number there would
# silently shift every window by a day, so days of the week are written by name.
_DOW_NUMBER = re.compile(r"\d")


class ChangeWindow(StrictModel):
    """Recurring times at which changes that restart a running lane may go."""

    description: str = ""
    cron: str = Field(
        description="five crontab fields: minute hour day-of-month month day-of-week (days by name: mon-fri), "
        "each opening of the window"
    )
    timezone: str = Field(description="IANA time zone the cron fields are read in, e.g. 'Europe/Berlin' or 'UTC'")
    duration_minutes: int = Field(gt=0, le=7 * 24 * 60, description="how long the window stays open")
    lanes: tuple[Name, ...] = Field(default=(), description="lanes this window holds, by name")
    host_labels: dict[str, str] = Field(
        default_factory=dict,
        description="the window holds every lane one of whose hosts carries all of these labels "
        "(state/hosts/<host>.yaml `labels`)",
    )

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone '{value}' (an IANA name such as 'Europe/Berlin')") from exc
        return value

    @model_validator(mode="after")
    def _parses(self) -> ChangeWindow:
        fields = self.cron.split()
        if len(fields) != 5:
            raise ValueError(f"cron '{self.cron}' has {len(fields)} fields; five are needed: minute hour day month dow")
        if _DOW_NUMBER.search(fields[4]):
            raise ValueError(
                f"day of week '{fields[4]}': write days by name (mon, tue, ... sun); numbers mean different days "
                "in crontab and in APScheduler"
            )
        self.trigger()  # raises ValueError on a field out of range
        return self

    def trigger(self) -> CronTrigger:
        return CronTrigger.from_crontab(self.cron, timezone=ZoneInfo(self.timezone))

    def holds(self, lane: str, host_labels: Iterable[Mapping[str, str]]) -> bool:
        """Whether this window holds `lane`, whose hosts carry `host_labels`."""
        if lane in self.lanes:
            return True
        if not self.host_labels:
            return False
        wanted = self.host_labels.items()
        return any(wanted <= dict(labels).items() for labels in host_labels)


class WindowsFile(StrictModel):
    windows: dict[Name, ChangeWindow] = Field(default_factory=dict)


@dataclass(frozen=True)
class WindowState:
    """One window at one instant: open (and until when), or when it opens next (None: never again)."""

    name: str
    open: bool
    closes: datetime | None = None
    opens: datetime | None = None


def window_state(name: str, window: ChangeWindow, at: datetime) -> WindowState:
    """Window `name` at the aware instant `at`.

    The window is open at `at` when some opening s has s <= at < s + duration, i.e. when the first opening
    after `at - duration` is not after `at`. CronTrigger's next fire time is the first opening at or after
    the instant given, rounded up to the second, so one microsecond past `at - duration` excludes an
    opening exactly one duration ago (that window has just closed).
    """
    duration = timedelta(minutes=window.duration_minutes)
    after = (at - duration + timedelta(microseconds=1)).astimezone(UTC)
    first = window.trigger().get_next_fire_time(None, after)
    if first is None:
        return WindowState(name, open=False)
    first = first.astimezone(UTC)
    if first <= at:
        return WindowState(name, open=True, closes=first + duration)
    return WindowState(name, open=False, opens=first)


@dataclass(frozen=True)
class Hold:
    """Why a change to a lane waits: the windows it is under, all closed, and the earliest next opening."""

    windows: tuple[str, ...]
    until: datetime | None
    """None when no window of the lane opens again (or one it names is not defined)."""
    missing: tuple[str, ...] = ()
    """Windows the lane file names that policies/windows.yaml does not define."""

    def describe(self) -> str:
        names = ", ".join(f"'{n}'" for n in self.windows)
        if self.missing:
            undefined = ", ".join(f"'{n}'" for n in self.missing)
            return f"the lane names change window {undefined}, which policies/windows.yaml does not define"
        if self.until is None:
            return f"outside change window {names}, which never opens again"
        return f"outside change window {names}: held until {self.until.strftime('%Y-%m-%dT%H:%M:%SZ')}"


def lane_hold(
    windows: WindowsFile, lane: str, named: str | None, host_labels: Iterable[Mapping[str, str]], at: datetime
) -> Hold | None:
    """None when a change to `lane` may go at `at` (no window holds it, or one is open), else the Hold.

    `named` is the window the lane file names; a name not defined holds the change (a typo must not
    turn a window off), and says so.
    """
    labels = list(host_labels)
    names = {n for n, w in windows.windows.items() if w.holds(lane, labels)}
    if named is not None:
        if named not in windows.windows:
            return Hold((named,), None, missing=(named,))
        names.add(named)
    if not names:
        return None
    states = [window_state(n, windows.windows[n], at) for n in sorted(names)]
    if any(s.open for s in states):
        return None
    opens = [s.opens for s in states if s.opens is not None]
    return Hold(tuple(sorted(names)), min(opens) if opens else None)
