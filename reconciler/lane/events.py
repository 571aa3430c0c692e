"""What happens to a lane (events, the machine's input) and what must be done about it (effects, its output).

An event is a fact that execute, the planner or an operator learned, never a sentence about health: the
machine (`reconciler.lane.machine`) alone decides the state that follows. An effect is work the machine asks
of execute (put the last healthy spec back, stop ranks that were just started) or something to tell people.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from reconciler.lane.state import Gate, Phase, Serving, TxKind, Wanted


class Seen(StrEnum):
    """What asking a lane that no transaction changes found."""

    READY = "ready"
    """Every rank runs and the engine answered (its readiness stages passed)."""
    NOT_ANSWERING = "not-answering"
    """Every rank runs, but the engine did not answer."""
    NOTHING_RUNS = "nothing-runs"
    """A stopped or removed lane of which nothing runs."""
    UNREACHABLE = "unreachable"
    """A host the lane needs did not answer the probe (or refused our key)."""


@dataclass(frozen=True, kw_only=True)
class Event:
    wanted: Wanted | None = None
    """What the commit this event happened at asks of the lane; None leaves what the state says."""
    why: str | None = None
    """Said for people; it becomes the state's last error (None clears it)."""


@dataclass(frozen=True, kw_only=True)
class Observed(Event):
    """A lane no transaction changes was looked at."""

    seen: Seen
    fingerprint: str | None = None
    """The spec seen ready, when the observer knows it (a READY only); None keeps what the state says."""


@dataclass(frozen=True, kw_only=True)
class Started(Event):
    kind: TxKind
    fingerprint: str | None
    commit: str | None
    phase: Phase = Phase.PREPARING
    deadline: float | None = None


@dataclass(frozen=True, kw_only=True)
class Progressed(Event):
    """The transaction in flight entered `phase`, which gives up at `deadline`."""

    phase: Phase
    deadline: float | None = None
    candidate: Gate | None = None
    """WATCHING: where the new spec passed its gate (blue/green), the route the gateway takes meanwhile."""


@dataclass(frozen=True, kw_only=True)
class GatePassed(Event):
    """`serving` passed its readiness gate: it is what serves now."""

    serving: Serving


@dataclass(frozen=True, kw_only=True)
class StepFailed(Event):
    """A step of the transaction in flight failed."""

    touched: bool
    """Ranks that ran (or were started) had been touched when it failed."""
    transient: bool
    """A fault of the moment: the spec is tried again after `delay_s`, doubling, until the flap limit."""
    delay_s: float = 0.0
    engine: str | None = None
    """The engine's own last meaningful lines, when it said something."""
    fingerprint: str | None = None
    """The spec that failed, when no transaction of the state names it (a swap's pulls ahead of its stops)."""


@dataclass(frozen=True, kw_only=True)
class Restored(Event):
    """Putting the last healthy spec back ended: `ok` when it runs again (a rollback)."""

    ok: bool
    engine: str | None = None


@dataclass(frozen=True, kw_only=True)
class Blocked(Event):
    """Cannot act now: a host held by `by`, or (with `until`) a change window that opens then."""

    by: str
    until: float | None = None
    delay_s: float = 0.0
    """A lease: the first wait before the lane is looked at again, from the error that blocked it (it doubles
    while the lane stays blocked, `machine.lease_delay`); 0: no retry of its own (news wakes it)."""
    jitter: float = 0.0
    """A draw in [0, 1) by whoever saw the block (the machine has no randomness of its own): the wait is shortened
    by up to `machine.LEASE_JITTER` of itself, so reconcilers blocked on each other's leases do not look again in
    step, every minute on the minute."""


@dataclass(frozen=True, kw_only=True)
class Interrupted(Event):
    """A shutdown cut the transaction short; `touched`: ranks had been touched (the last healthy spec is restarted
    without waiting for it to load)."""

    touched: bool
    restarted: str | None = None
    """The fingerprint of the last healthy spec restarted without waiting (it is not seen ready yet)."""


@dataclass(frozen=True, kw_only=True)
class Preempted(Event):
    """A newer commit that changes the lane ended its transaction at a safe point; `touched`: its new ranks are
    stopped, the old spec is not restored (the newest spec follows)."""

    touched: bool


@dataclass(frozen=True, kw_only=True)
class Denied(Event):
    """Policy refused the lane at this commit; what ran before keeps running."""


@dataclass(frozen=True, kw_only=True)
class PlanFailed(Event):
    """The plan failed the desired spec (action `fail`: a model path missing) before anything was touched: what
    served serves."""


@dataclass(frozen=True, kw_only=True)
class Suspended(Event):
    """Hands off, said by `by` (a person, or `state.LANE_FILE`)."""

    by: str


@dataclass(frozen=True, kw_only=True)
class Resumed(Event):
    """A person's suspension ended."""


@dataclass(frozen=True, kw_only=True)
class Retried(Event):
    """`lanes retry`: the condemned spec, and any backoff, no longer hold the lane back."""


@dataclass(frozen=True, kw_only=True)
class Stopped(Event):
    """Every rank of a lane that should not run was stopped."""


@dataclass(frozen=True, kw_only=True)
class SwapUndone(Event):
    """This lane's failure undid a swap: the lanes that gave it their hosts were brought back (`undone` says
    how, for people). The planner holds that swap while this lane's failed spec is held."""

    undone: str


@dataclass(frozen=True, kw_only=True)
class Internal(Event):
    """lanes itself failed while planning or applying this lane (a bug): nothing else was affected."""


# -- effects -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RestoreHealthy:
    """Put `serving` (the last healthy spec) back; `wait`: gate it (a shutdown does not wait)."""

    serving: Serving
    wait: bool = True


@dataclass(frozen=True)
class StopNew:
    """Stop the ranks this transaction started (nothing is restored in their place)."""


class AnnounceKind(StrEnum):
    ROLLED_OUT = "rolled-out"
    """The desired spec passed its gate."""
    KEPT = "kept"
    """The desired spec failed before anything stopped: the old spec still serves."""
    ROLLED_BACK = "rolled-back"
    """The desired spec failed after ranks stopped; the last healthy spec serves again."""
    DARK = "dark"
    """Nothing of the lane serves now."""


@dataclass(frozen=True)
class Announce:
    """Something people are told (a notification): what is true after the event, not what was tried."""

    kind: AnnounceKind
    text: str


Effect = RestoreHealthy | StopNew | Announce
