"""What a lane transaction reports: progress events, results, settings, the step failure.

Shared by the transaction (apply) and its rollback, and read by the CLI and the daemon.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ProgressEvent:
    lane: str
    step: str
    status: str  # started | done | failed | info
    detail: str = ""


ProgressFn = Callable[[ProgressEvent], None]


@dataclass
class LaneResult:
    lane: str
    action: str
    result: str  # applied | stopped | rolled-back | failed | denied | blocked | noop
    error: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExecutorConfig:
    owner: str = "lanes"
    lease_ttl_s: int = 900
    log_tail: int = 50
    watch_interval_s: float = 5.0


class StepFailedError(Exception):
    """A step of a transaction failed; `touched` says whether old ranks were already stopped."""

    def __init__(self, step: str, message: str, *, touched: bool) -> None:
        super().__init__(message)
        self.step = step
        self.touched = touched  # whether old ranks were already stopped
