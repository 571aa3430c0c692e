"""The daemon's one dispatcher, and the calls its jobs make where something happens.

The daemon installs a dispatcher at start (`start`), swaps it on a reload
and closes it on the way out; the decider and the evidence and upstream jobs
call `on_cycle`, `on_refused`, `on_regression` and `on_proposal` where they
log what happened. Without an installed dispatcher (a command, a test of a
job) these do nothing, and none of them ever raises into its caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

import structlog

from reconciler.execute.cycle import CycleResult
from reconciler.notifications.dispatch import Dispatcher, TallyFn, no_tally
from reconciler.notifications.events import (
    Event,
    HostWatch,
    Refusal,
    cycle_events,
    proposal_event,
    refused_event,
    regression_event,
    trial_event,
)
from reconciler.notifications.settings import NotificationSettings
from reconciler.spec.load import DesiredState

log = structlog.get_logger("lanes.notifications")


class _Hub:
    def __init__(self) -> None:
        self.dispatcher: Dispatcher | None = None
        self.tally: TallyFn = no_tally
        """Kept across reloads: a new dispatcher counts into the same place as the one it replaces."""
        self.hosts = HostWatch()
        self.closing: set[asyncio.Task[None]] = set()


_HUB = _Hub()


def start(settings: NotificationSettings, tally: TallyFn | None = None) -> Dispatcher | None:
    """Install and start a dispatcher for `settings` (none without receivers); call on the daemon's loop.

    `tally` is told every message sent, failed for good or dropped (the daemon's metrics); a reload keeps it.
    """
    if tally is not None:
        _HUB.tally = tally
    if not settings.receivers:
        return None
    dispatcher = Dispatcher(settings, tally=_HUB.tally)
    dispatcher.start()
    _HUB.dispatcher = dispatcher
    log.info("notifications.started", receivers=sorted(settings.receivers))
    return dispatcher


def reload(settings: NotificationSettings) -> None:
    """New settings: a new dispatcher that remembers what was already sent; the old one drains and stops."""
    old = _HUB.dispatcher
    if old is not None and old.settings == settings:
        return
    _HUB.dispatcher = None
    new = start(settings)
    if old is None:
        return
    if new is not None:
        new.seen = old.seen
    closing = asyncio.get_running_loop().create_task(old.close())
    _HUB.closing.add(closing)
    closing.add_done_callback(_HUB.closing.discard)


async def stop() -> None:
    dispatcher, _HUB.dispatcher = _HUB.dispatcher, None
    if dispatcher is not None:
        await dispatcher.close()
    _HUB.hosts = HostWatch()
    _HUB.tally = no_tally


def queued() -> dict[str, int]:
    """Messages waiting per receiver of the installed dispatcher (none installed: nothing)."""
    return _HUB.dispatcher.queued() if _HUB.dispatcher is not None else {}


def publish(events: Iterable[Event]) -> None:
    dispatcher = _HUB.dispatcher
    if dispatcher is None:
        return
    try:
        dispatcher.publish(events)
    except Exception as exc:  # telling people must never cost the daemon its cycle
        log.warning("notification.publish_failed", error=f"{type(exc).__name__}: {exc}")


def _safely(build: Any, *args: Any) -> list[Event]:
    try:
        built = build(*args)
    except Exception as exc:
        log.warning("notification.build_failed", error=f"{type(exc).__name__}: {exc}")
        return []
    return list(built) if isinstance(built, list) else [built]


def on_cycle(result: CycleResult, desired: DesiredState) -> None:
    """After a reconcile cycle: denied, failed and rolled-back lanes; hosts that stopped answering or are back."""
    if _HUB.dispatcher is None:
        return
    publish(_safely(cycle_events, result, desired) + _safely(_HUB.hosts.events, result, desired))


def on_refused(commit: str, reason: str, kind: Refusal) -> None:
    publish(_safely(refused_event, commit, reason, kind))


def on_regression(lane: str, commit: str, evidence_commit: str, ev: Mapping[str, Any], desired: DesiredState) -> None:
    if ev.get("regression"):
        publish(_safely(regression_event, lane, commit, evidence_commit, ev, desired))


def on_proposal(outcome: Any, base: str, desired: DesiredState) -> None:
    """An upstream proposal outcome (`reconciler.upstream.proposals.ProposalOutcome`); only `opened` is told."""
    if getattr(outcome, "action", None) != "opened":
        return
    publish(_safely(proposal_event, outcome.lane, outcome.version, outcome.branch, outcome.pr_url, base, desired))


def on_trial(
    branch: str,
    commit: str,
    lanes: tuple[str, ...],
    outcome: str,
    where: str | None,
    regression: bool,
    desired: DesiredState | None,
) -> None:
    """A trial branch was tried (measured, or not tried and why): told once per branch head."""
    publish(_safely(trial_event, branch, commit, lanes, outcome, where, regression, desired))
