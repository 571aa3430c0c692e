"""What staging takes and gives: where a model comes from, progress, the report, the error.

See `reconciler/execute/staging.py` for what staging does with them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from reconciler.errors import StepFailedError, TransientError
from reconciler.execute.rsync import RsyncOutput
from reconciler.execute.stagecmd import StageHost
from reconciler.facts.modelcheck import ModelCheck, needed
from reconciler.plan.fanout import FanoutPlan

CONTROL_NODE = "control-node"
"""The sender's name for a folder on the control node (where lanes runs)."""
PROGRESS_EVERY_S = 0.5


class FileLike(Protocol):
    @property
    def path(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def sha256(self) -> str: ...


class ManifestLike(Protocol):
    """A model's manifest (`reconciler.spec.manifest.Manifest` is one)."""

    @property
    def files(self) -> Sequence[FileLike]: ...


@dataclass(frozen=True)
class StageOrigin:
    """Where the model's files come from: a folder on the control node, an origin host, or a Spark."""

    name: str
    path: str
    host: StageHost | None = None
    spark: bool = False
    """`host` is a fleet Spark holding the model at `path` (its own folder): a holder, checked like a receiver."""
    root: str | None = None
    """A control-node origin's allowed root: a file of it may be a symlink only to a file under this root
    (a Hugging Face cache's snapshot links into its blobs/); None: only to a file under `path` itself."""

    @classmethod
    def local(cls, path: str, root: str | None = None) -> StageOrigin:
        return cls(CONTROL_NODE, path, root=root)

    @classmethod
    def remote(cls, host: StageHost, path: str) -> StageOrigin:
        return cls(host.name, path, host)

    @classmethod
    def from_spark(cls, host: StageHost) -> StageOrigin:
        return cls(host.name, host.root, host, spark=True)


@dataclass(frozen=True)
class StageProgress:
    lane: str | None
    host: str
    bytes_done: int
    bytes_total: int
    rate_bps: float
    eta_s: float | None
    phase: Literal["copy", "verify"] = "copy"


@dataclass(frozen=True)
class StageReport:
    model: str
    plan: FanoutPlan
    sent_by: Mapping[str, int]
    """Bytes each sender put on the wire (rsync's "Total bytes sent"), by sender name."""
    received_by: Mapping[str, int]
    """Bytes sent to each receiver."""
    copied: Mapping[str, tuple[str, ...]]
    """The files each receiver was sent."""
    checks: Mapping[str, ModelCheck]
    """Each receiver's last check (after its copy, or the first one when it needed nothing)."""
    seconds: float
    phases: Mapping[str, float] = field(default_factory=dict)
    """Seconds in each phase: the first checks, starting the agent, copying and checking again (per round, its
    slowest receiver), summed over rounds."""

    @property
    def total_sent(self) -> int:
        return sum(self.sent_by.values())


class StagingError(StepFailedError):
    """Staging failed on `host` (the receiver), at `file` when one is to blame; nothing was stopped."""

    def __init__(self, message: str, *, host: str, file: str | None = None, transient: bool,
                 delay_s: float = 0.0) -> None:  # fmt: skip
        super().__init__("stage", message, touched=False, transient=transient,
                         delay_s=delay_s or (TransientError.delay_s if transient else 0.0))  # fmt: skip
        self.host = host
        self.file = file


def space_needed(check: ModelCheck, sizes: Mapping[str, int]) -> int:
    """Bytes a receiver's disk must take for the files it is to be sent.

    A file absent under its name with bytes in rsync's partial folder grows there in place and is renamed
    ("it maxes out at dest + tmp", rsync(1) --partial-dir): its size less those bytes. Any other file is
    written whole beside the old one, renamed at the end: its full size."""
    total = 0
    for path in needed(check):
        state = check.files[path]
        if state.size == 0 and state.partial_bytes:
            total += max(0, sizes[path] - state.partial_bytes)
        else:
            total += sizes[path]
    return total


def mib(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MiB"


@dataclass
class Receiving:
    """One receiver's transfers of a round: their outputs summed into its progress."""

    host: str
    total: int
    lane: str | None
    report: Callable[[StageProgress], None] | None
    outputs: list[RsyncOutput] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    last: float = 0.0

    def tick(self, *, final: bool = False) -> None:
        now = time.monotonic()
        if self.report is None or (not final and now - self.last < PROGRESS_EVERY_S):
            return
        self.last = now
        done = min(self.total, sum(o.bytes_done for o in self.outputs))
        rate = done / (now - self.started) if now > self.started else 0.0
        eta = (self.total - done) / rate if rate > 0 else None
        self.report(StageProgress(self.lane, self.host, done, self.total, rate, eta))
