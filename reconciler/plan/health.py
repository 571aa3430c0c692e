"""Lane health as a pure state machine: `next_health(current, outcome) -> health`.

Every write of a lane's health goes through `next_health`, so the
transitions exist in one place and a table test covers each of them
(tests/plan/test_health_table.py). The outcome is what a cycle learned about
the lane (a typed fact, never a sentence); the health is what a person reads
in `lanes status`:

- healthy: every rank runs the desired spec and the engine answered the last time it was asked;
- progressing: a transaction is under way, or a spec was started and its readiness is not yet observed;
- degraded: something serves, but not as desired (the last healthy spec after a rollback, an engine
  that stopped answering, a host that cannot be reached);
- failed: nothing serves the lane and the desired spec did not come up;
- denied: policy refused the lane at this commit; what ran before keeps running;
- blocked: the lane never served and cannot be acted on now (a lease held elsewhere, a retry pending);
- stopped: the lane is stopped and nothing of it runs.
"""

from __future__ import annotations

import math
from enum import StrEnum


class LaneHealth(StrEnum):
    HEALTHY = "healthy"
    PROGRESSING = "progressing"
    DEGRADED = "degraded"
    FAILED = "failed"
    DENIED = "denied"
    BLOCKED = "blocked"
    STOPPED = "stopped"


SERVING = frozenset({LaneHealth.HEALTHY, LaneHealth.DEGRADED})
"""States in which some spec of the lane answers requests."""


class Outcome(StrEnum):
    """What one cycle found or did for a lane."""

    OBSERVED_READY = "observed-ready"
    """In sync, and the engine answered when asked this cycle (or its readiness gate passed)."""
    OBSERVED_NOT_ANSWERING = "observed-not-answering"
    """In sync, every rank runs, but the engine did not answer the health check."""
    HELD_SERVING = "held-serving"
    """The desired spec is held back after it failed (condemned, or in backoff), and the spec that last passed its
    gate serves in its place: it answered its health check this cycle, or its drift was just repaired."""
    NOTHING_RUNS = "nothing-runs"
    """A stopped or removed lane of which nothing runs."""
    STARTED = "started"
    """A deploy or verification transaction began."""
    APPLIED = "applied"
    """The desired spec passed its readiness gate."""
    STOPPED = "stopped"
    """Every rank of a lane that should not run was stopped."""
    DENIED = "denied"
    """Policy refused the lane at this commit."""
    UNREACHABLE = "unreachable"
    """A host the lane needs did not answer the probe (or refused our key)."""
    WAITING = "waiting"
    """Cannot act now: a lease held elsewhere, a retry after a transient failure not yet due, a spec held back."""
    FAILED_UNTOUCHED = "failed-untouched"
    """The transaction failed before any rank was stopped (pull, env files, model missing): what served serves."""
    ROLLED_BACK = "rolled-back"
    """The desired spec failed after ranks were stopped; the last healthy spec serves again."""
    ROLLBACK_FAILED = "rollback-failed"
    """The desired spec failed and there was nothing to restore, or restoring it failed."""
    INTERRUPTED = "interrupted"
    """A shutdown cut the transaction short; the last healthy spec was restarted without waiting."""
    INTERRUPTED_UNTOUCHED = "interrupted-untouched"
    """A shutdown came before any rank was stopped."""
    STOP_FAILED = "stop-failed"
    """Stopping a lane's ranks failed; some may still run."""
    INTERNAL_ERROR = "internal-error"
    """lanes itself failed while planning or applying this lane (a bug): nothing else was affected."""
    SUSPENDED = "suspended"
    """The lane file says hands off: nothing was done, and the health seen last stands."""


def next_health(current: LaneHealth | None, outcome: Outcome) -> LaneHealth:
    """The lane's health after `outcome`, given its health before (None: no record yet)."""
    serving = current in SERVING
    match outcome:
        case Outcome.OBSERVED_READY | Outcome.APPLIED:
            return LaneHealth.HEALTHY
        case Outcome.OBSERVED_NOT_ANSWERING:
            # A spec whose readiness was never observed stays progressing: the gate decides it, not the resync.
            return LaneHealth.PROGRESSING if current == LaneHealth.PROGRESSING else LaneHealth.DEGRADED
        case Outcome.NOTHING_RUNS | Outcome.STOPPED:
            return LaneHealth.STOPPED
        case Outcome.STARTED | Outcome.INTERRUPTED:
            return LaneHealth.PROGRESSING
        case Outcome.DENIED:
            return LaneHealth.DENIED
        case Outcome.UNREACHABLE:
            # What serves can no longer be seen to serve; a lane that served nothing still serves nothing.
            if current is None or current == LaneHealth.HEALTHY:
                return LaneHealth.DEGRADED
            return current
        case Outcome.SUSPENDED:
            # lanes does not look after a suspended lane: it says what it last knew, or that it never served.
            return current if current is not None else LaneHealth.BLOCKED
        case Outcome.WAITING | Outcome.INTERRUPTED_UNTOUCHED | Outcome.INTERNAL_ERROR:
            if current is None or (current == LaneHealth.PROGRESSING and outcome == Outcome.WAITING):
                return LaneHealth.BLOCKED
            return current
        case Outcome.FAILED_UNTOUCHED:
            return LaneHealth.DEGRADED if serving else LaneHealth.FAILED
        case Outcome.ROLLED_BACK | Outcome.HELD_SERVING:
            # Something serves, but not the desired spec: degraded however well it answers.
            return LaneHealth.DEGRADED
        case Outcome.ROLLBACK_FAILED:
            return LaneHealth.FAILED
        case Outcome.STOP_FAILED:
            return current if current is not None else LaneHealth.DEGRADED
    raise AssertionError(f"unhandled outcome {outcome}")  # pragma: no cover - exhaustive match


FLAP_LIMIT = 3
"""Transient failures of one spec in a row after which it is condemned as if permanent."""
BACKOFF_MAX_S = 900.0
"""The longest wait between two tries of a spec that failed transiently (one resync interval and a half)."""


def retry_delay(failures: int, first_delay_s: float) -> float | None:
    """Seconds to wait before the next try after `failures` transient failures in a row; None: condemn it."""
    if failures >= FLAP_LIMIT:
        return None
    return min(BACKOFF_MAX_S, first_delay_s * math.pow(2, max(0, failures - 1)))
