"""Which planned changes wait for a change window, and which never do.

Held: a change that restarts a running lane, i.e. at least one of its ranks runs and runs something other
than the desired spec (another spec or image, or a rank the new spec no longer has). Never held: a first
start (nothing runs), a stop (planned before any of this), the repair of ranks that died or went missing
while the others run the desired spec (the lane is down already; waiting keeps it down), a gate of a spec
that already runs, a rollback (the transaction's own), and a person's override.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from reconciler.facts.observed import ObservedContainer
from reconciler.plan.steps import Drift, DriftKind
from reconciler.spec.lane import Lane
from reconciler.spec.load import DesiredState
from reconciler.spec.windows import Hold, WindowsFile, lane_hold

CHANGES = frozenset({DriftKind.OTHER_SPEC, DriftKind.OTHER_IMAGE, DriftKind.UNWANTED})
"""Drift that a commit makes: what runs is not what the lane file now says."""

OVERRIDE_TRAILER = "lanes-change-window"
"""A commit message trailer `Lanes-Change-Window: now` lets that commit's changes go outside any window."""


def restarts_running(current: Sequence[tuple[str, ObservedContainer]], drift: Sequence[Drift]) -> bool:
    """The planned redeploy stops ranks that run, to put another spec in their place."""
    return any(c.running for _, c in current) and any(d.kind in CHANGES for d in drift)


def hold_for(lane: Lane, desired: DesiredState, windows: WindowsFile, at: float) -> Hold | None:
    """The hold on a restarting change to `lane` at epoch second `at`, or None when it may go now."""
    labels = [desired.hosts[h].labels for h in lane.hosts if h in desired.hosts]
    return lane_hold(windows, lane.name, lane.change_window, labels, datetime.fromtimestamp(at, UTC))


def overrides_windows(message: str) -> bool:
    """Whether a commit message carries the trailer `Lanes-Change-Window: now` (case ignored)."""
    for line in message.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == OVERRIDE_TRAILER and value.strip().lower() == "now":
            return True
    return False
