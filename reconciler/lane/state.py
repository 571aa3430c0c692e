"""A lane's whole state, frozen and typed: `LaneState`.

Each word means one thing:

- health: what a person reads in `lanes status` (`LaneHealth`, below);
- wanted: what the newest commit asks of the lane (run or stop, at which commit, on which hosts);
- serving: the fingerprint of the spec that runs and was last seen ready; None when nothing of the lane serves;
- healthy: the spec that last passed its readiness gate (its rank specs, where it was gated, its commit): what a
  rollback restores, kept after the lane stops serving;
- hold: the one reason the lane is not acted on now (a condemned spec, a backoff, a change window, a suspension,
  a host held by someone else);
- transaction: the change in flight (deploy, verify, stop, restore) with its phase and deadline;
- error: the last error, with the engine's own words when an engine said something.

The rank specs of `healthy` are kept in their journal (JSON) form: the machine never looks inside them, and
this package imports nothing that renders them (only `reconciler.spec` and `reconciler.facts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class LaneHealth(StrEnum):
    """What a person reads in `lanes status`.

    - healthy: every rank runs the desired spec and the engine answered the last time it was asked;
    - progressing: a transaction is under way, or a spec was started and its readiness is not yet observed;
    - degraded: something serves, but not as desired (the last healthy spec after a rollback, an engine that
      stopped answering, a host that cannot be reached);
    - failed: nothing serves the lane and the desired spec did not come up;
    - denied: policy refused the lane at this commit; what ran before keeps running;
    - blocked: the lane never served and cannot be acted on now (a lease held elsewhere, a retry pending);
    - stopped: the lane is stopped and nothing of it runs.
    """

    HEALTHY = "healthy"
    PROGRESSING = "progressing"
    DEGRADED = "degraded"
    FAILED = "failed"
    DENIED = "denied"
    BLOCKED = "blocked"
    STOPPED = "stopped"


SERVING = frozenset({LaneHealth.HEALTHY, LaneHealth.DEGRADED})
"""Healths in which some spec of the lane answers requests."""


@dataclass(frozen=True)
class Gate:
    """Where and how a spec passed its readiness gate: the head host, the port, the served model name."""

    host: str
    port: int
    served_model: str


@dataclass(frozen=True)
class Serving:
    """A spec that passed its gate: its fingerprint, its rank specs (journal JSON, opaque here), its gate, its
    commit."""

    fingerprint: str
    specs: tuple[Mapping[str, Any], ...] = ()
    gate: Gate | None = None
    commit: str | None = None


@dataclass(frozen=True)
class Wanted:
    """What the newest commit asks of the lane."""

    desired: str = "running"
    """running | stopped"""
    commit: str | None = None
    hosts: tuple[str, ...] = ()


# -- the hold: the one reason a lane is not acted on now ---------------------------------------------------------


@dataclass(frozen=True)
class Condemned:
    """The spec `fingerprint` failed for good (or flapped `n` times): not tried until it changes or `lanes retry`."""

    fingerprint: str
    n: int = 0
    """Transient failures in a row that led here (0: a permanent failure)."""


@dataclass(frozen=True)
class Backoff:
    """The spec `fingerprint` failed on a passing fault `n` times in a row: tried again at `at` (epoch s)."""

    fingerprint: str
    at: float
    n: int


@dataclass(frozen=True)
class Window:
    """A change waits for a change window that opens at `until` (epoch s)."""

    until: float


@dataclass(frozen=True)
class SuspendedBy:
    """Hands off: `by` (a person, or the lane file) said so, for `why`. `under` is the failure hold it covers,
    back in force when the suspension ends."""

    by: str
    why: str = ""
    under: Condemned | Backoff | None = None
    since: float | None = None
    """When it began (epoch s); kept while the same hands say the same thing again (each resync of a held lane)."""

    @property
    def by_person(self) -> bool:
        """Said at runtime (`lanes suspend`), not by the lane file: it lasts until `lanes resume`."""
        return self.by != LANE_FILE

    def reason(self, lane: str) -> str:
        """Why the lane is left alone, as the planner and every status line say it."""
        if not self.by_person:
            return "suspended in its lane file"
        return f"suspended at runtime by {self.by}: {self.why} (`lanes resume {lane}` lifts it)"


@dataclass(frozen=True)
class LeasedBy:
    """A host the lane needs is held by someone else (`by`: who holds it, as the lease says).

    `at`: when the lane is looked at again (epoch s), on the one curve of `machine.lease_delay` from the
    blocking error's own `delay_s`; None when the block named no delay. `n`: blocks in a row.
    """

    by: str
    at: float | None = None
    n: int = 0


Hold = Condemned | Backoff | Window | SuspendedBy | LeasedBy
FAILURE_HOLDS = (Condemned, Backoff)
"""Holds that say the desired spec failed: what serves meanwhile is degraded however well it answers."""

LANE_FILE = "lane file"
"""`SuspendedBy.by` when the lane file says hands off: that suspension lasts while the file says so."""


# -- the transaction in flight -------------------------------------------------------------------------------------


class TxKind(StrEnum):
    DEPLOY = "deploy"
    """Start the desired spec in place of what runs, and gate it."""
    VERIFY = "verify"
    """Gate ranks that already run the desired spec but were never seen ready."""
    STOP = "stop"
    """Stop every rank of a lane that should not run."""
    RESTORE = "restore"
    """Put the last healthy spec back (its drift repaired while the desired spec is held, a swap undone)."""


class Phase(StrEnum):
    """Where a transaction is. Only PREPARING leaves running ranks alone: from STOPPING on it has touched them."""

    PREPARING = "preparing"
    """Leases, pulls, env files, staging: nothing that runs has been touched."""
    STOPPING = "stopping"
    STARTING = "starting"
    GATING = "gating"
    """Waiting for readiness, until the transaction's deadline: a safe point to end it."""
    DRAINING = "draining"
    """Out of the gateway's route before its ranks stop: requests in flight finish (bounded), none are sent."""
    BESIDE = "beside"
    """Blue/green: the new spec's ranks start and are gated on other hosts while the old ranks serve untouched."""
    WATCHING = "watching"
    """Blue/green: the new spec passed its gate and takes the traffic (`Transaction.candidate`); the old ranks
    still run, so a failed watch window moves the traffic back at once, until the window passes."""
    RESTORING = "restoring"
    """The transaction failed after touching ranks: the last healthy spec is being put back."""


TOUCHING = frozenset({Phase.STOPPING, Phase.STARTING, Phase.GATING, Phase.RESTORING})


@dataclass(frozen=True)
class Transaction:
    kind: TxKind
    fingerprint: str | None
    commit: str | None
    phase: Phase
    started: float
    deadline: float | None = None
    """When the current phase gives up (epoch s): a gate's ready timeout; None when the phase has none."""
    before: LaneHealth | None = None
    """The lane's health before the transaction began: its endings that touched nothing resolve from it (the
    transaction's own "progressing" says nothing of what serves)."""
    candidate: Gate | None = None
    """Blue/green, once WATCHING: where the new spec passed its gate, which the gateway routes to meanwhile."""

    @property
    def touched(self) -> bool:
        return self.phase in TOUCHING


@dataclass(frozen=True)
class LastError:
    message: str
    """What went wrong, said for people."""
    engine: str | None = None
    """The engine's own last meaningful lines (vLLM's "unrecognized arguments ..."), when an engine spoke."""
    at: float = 0.0


@dataclass(frozen=True)
class LaneState:
    health: LaneHealth | None = None
    """None: the lane has no record yet."""
    wanted: Wanted = field(default_factory=Wanted)
    applied: str | None = None
    """The commit the lane was last brought to (its gate passed, or it stopped)."""
    serving: str | None = None
    healthy: Serving | None = None
    hold: Hold | None = None
    transaction: Transaction | None = None
    error: LastError | None = None
    swap_undone: str | None = None
    """This lane's last failure undid a swap (it did not take the hosts another lane gave it): what was undone,
    said for people. Cleared when the lane starts a new transaction."""

    def route(self) -> Gate | None:
        """Where the gateway should send this lane's traffic now, or None: nowhere.

        A lane routes to the spec that last passed its gate while that spec serves and nothing in flight has
        touched its ranks: before a change (preparing), while a blue/green change starts and gates the new spec
        beside it, and after a failed change that stopped nothing (degraded, the old spec serving). While a
        blue/green change is watched, traffic goes to the new spec's gate. Draining, stopping, starting, gating
        in place and restoring route nowhere.
        """
        healthy, op = self.healthy, self.transaction
        if self.wanted.desired != "running" or healthy is None or healthy.gate is None:
            return None
        if op is not None and op.phase == Phase.WATCHING:
            return op.candidate
        if op is not None and op.phase not in (Phase.PREPARING, Phase.BESIDE):
            return None
        health = op.before if op is not None and op.before is not None else self.health
        if self.serving is None or self.serving != healthy.fingerprint:
            return None
        if health is LaneHealth.HEALTHY:
            return healthy.gate
        failure = self.hold.under if isinstance(self.hold, SuspendedBy) else self.hold
        if health is LaneHealth.DEGRADED and isinstance(failure, FAILURE_HOLDS) and failure.fingerprint != self.serving:
            return healthy.gate  # the desired spec failed and nothing was stopped: the spec that passed serves on
        return None

    @property
    def condemned(self) -> str | None:
        """The fingerprint held back for good, also under a suspension."""
        hold = self.hold.under if isinstance(self.hold, SuspendedBy) else self.hold
        return hold.fingerprint if isinstance(hold, Condemned) else None

    @property
    def backoff(self) -> Backoff | None:
        hold = self.hold.under if isinstance(self.hold, SuspendedBy) else self.hold
        return hold if isinstance(hold, Backoff) else None

    @property
    def suspension(self) -> SuspendedBy | None:
        """A person's hold (`lanes suspend`): the planner leaves the lane alone while it stands."""
        return self.hold if isinstance(self.hold, SuspendedBy) and self.hold.by_person else None
