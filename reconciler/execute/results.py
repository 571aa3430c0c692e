"""What a lane transaction reports: progress events, typed results, settings.

Shared by the transaction, its gate and rollback, and read by the CLI and the daemon.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from reconciler.execute.localorigin import LocalOrigins
from reconciler.plan.steps import Cause


@dataclass(frozen=True)
class ProgressEvent:
    lane: str
    step: str
    status: str  # started | done | failed | info
    detail: str = ""


ProgressFn = Callable[[ProgressEvent], None]


class Result(StrEnum):
    """How a lane ended this cycle (a StrEnum: it compares and serialises as its value)."""

    APPLIED = "applied"
    VERIFIED = "verified"
    STOPPED = "stopped"
    ROLLED_BACK = "rolled-back"
    FAILED = "failed"
    DENIED = "denied"
    BLOCKED = "blocked"
    NOOP = "noop"
    SUSPENDED = "suspended"
    """The lane file says hands off: nothing was done."""
    PREEMPTED = "preempted"
    """A newer commit wanted another spec of the lane while this one was applied: ended at a safe point."""


SETTLED = frozenset({Result.APPLIED, Result.VERIFIED, Result.STOPPED, Result.NOOP, Result.SUSPENDED})
"""Results after which lanes has nothing left to do: the lane is where its commit wants it, or a person
suspended it and it is theirs."""


@dataclass
class LaneResult:
    lane: str
    action: str
    result: Result
    error: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)
    cause: Cause | None = None
    """Why the lane was planned as it was (the plan's cause)."""
    held_until: float | None = None
    """A change held by a change window: when the window opens (epoch seconds)."""
    untouched: bool = False
    """It failed before any rank of the lane was stopped: what served before still serves."""


@dataclass(frozen=True)
class ExecutorConfig:
    owner: str = "lanes"
    lease_ttl_s: int = 900
    log_tail: int = 50
    watch_interval_s: float = 5.0
    assess_timeout_s: float = 5.0
    """How long an in-sync lane's engine gets to answer its health check at a resync."""
    gpu_free_timeout_s: float = 60.0
    """How long a rank host's GPU may stay held after the old ranks stopped (the recipes' launcher waits 60 s)."""
    ssh_key: Path | None = None
    known_hosts: Path | None = None
    """The reconciler's own SSH key and pinned host keys: staging's rsync and ssh use them, nothing else."""
    stage_parallel: int = 4
    """rsync processes into one host at once when a model is staged."""
    origins: LocalOrigins = field(default_factory=LocalOrigins)
    """Where on the control node a model's `origin: {path}` may be (the operator's setting, never the repo's)."""
