"""The lane machine: `transition(state, event, now) -> (state, effects)` and `next_wake(state)`.

The only place a lane's next state is decided. It is pure (no clock: `now` is handed in; no I/O), total over
every (state, event) pair, and covered by one table test (tests/lane/test_machine_table.py).
"""

from __future__ import annotations

import math
from dataclasses import replace

from reconciler.lane.events import (
    Announce,
    AnnounceKind,
    Blocked,
    Denied,
    Effect,
    Event,
    GatePassed,
    Internal,
    Interrupted,
    Observed,
    PlanFailed,
    Preempted,
    Progressed,
    Restored,
    RestoreHealthy,
    Resumed,
    Retried,
    Seen,
    Started,
    StepFailed,
    StopNew,
    Stopped,
    Suspended,
    SwapUndone,
)
from reconciler.lane.state import (
    FAILURE_HOLDS,
    LANE_FILE,
    SERVING,
    Backoff,
    Condemned,
    Hold,
    LaneHealth,
    LaneState,
    LastError,
    LeasedBy,
    Phase,
    Serving,
    SuspendedBy,
    Transaction,
    TxKind,
    Window,
)

FLAP_LIMIT = 3
"""Transient failures of one spec in a row after which it is condemned as if permanent."""
BACKOFF_MAX_S = 900.0
"""The longest wait between two tries of a spec that failed transiently (one resync interval and a half)."""


def retry_delay(failures: int, first_delay_s: float) -> float | None:
    """Seconds to wait before the next try after `failures` transient failures in a row; None: condemn it."""
    if failures >= FLAP_LIMIT:
        return None
    return min(BACKOFF_MAX_S, first_delay_s * math.pow(2, max(0, failures - 1)))


LEASE_RETRY_MAX_S = 60.0
"""The longest wait between two looks at a lane blocked by another reconciler's lease: soon enough to follow
its finished apply, rare enough not to hammer a host it holds."""


LEASE_JITTER = 0.25
"""The share of a lease wait a block's jitter may take off it: waits stay within the curve's cap, never above."""


def lease_delay(blocks: int, first_delay_s: float, jitter: float = 0.0) -> float:
    """Seconds until a lane blocked `blocks` times in a row is looked at again: the one curve of blocked lanes,
    shortened by `jitter` (a draw in [0, 1)) times LEASE_JITTER of itself."""
    delay = min(LEASE_RETRY_MAX_S, first_delay_s * math.pow(2, max(0, blocks - 1)))
    return delay * (1.0 - LEASE_JITTER * min(max(jitter, 0.0), 1.0))


Step = tuple[LaneState, tuple[Effect, ...]]
LOOKS = (Observed, Blocked, Denied, PlanFailed, Suspended)
"""Events of a lane looked at, not acted on: said again at every cycle while nothing changes."""
KEEPS_ERROR = (Started, Progressed, Resumed, Retried)
"""Events that leave the last error as it was unless they say something: they are not news about what failed."""


def transition(state: LaneState, event: Event, now: float) -> Step:
    """The lane's state after `event` at `now` (epoch s), and what must be done about it."""
    restoring = state.transaction is not None and state.transaction.phase == Phase.RESTORING
    if isinstance(event, Restored) and restoring and state.error is not None:
        # The restore's words follow the failure's: "<what failed>; rolled back to <commit>".
        said = f"{state.error.message}; {event.why}" if event.why else state.error.message
        error: LastError | None = LastError(said, event.engine or state.error.engine, now)
    elif event.why is not None:
        engine = getattr(event, "engine", None)
        # A look that says the same words again keeps when they were first said: a held lane's reason, said at
        # every cycle, is not news (and a state that did not change is not written again). A failure is news.
        again = isinstance(event, LOOKS) and state.error is not None and state.error.message == event.why
        error = state.error if again and state.error is not None else LastError(event.why, engine, now)
    else:
        error = state.error if isinstance(event, KEEPS_ERROR) else None
    base = replace(state, wanted=event.wanted if event.wanted is not None else state.wanted, error=error)
    if not isinstance(event, Blocked | Suspended):
        base = replace(base, hold=_lapsed(base.hold))
    match event:
        case Observed():
            if state.transaction is not None:
                # The transaction in flight owns the lane's health (its gate decides it): a look from the side,
                # a resync while it runs, changes nothing.
                return replace(state, wanted=base.wanted), ()
            return _observed(base, event), ()
        case Started():
            return _started(base, event, now), ()
        case Progressed():
            if base.transaction is None:
                return base, ()  # nothing in flight: a late report changes nothing
            moved = replace(base.transaction, phase=event.phase, deadline=event.deadline, candidate=event.candidate)
            return replace(base, transaction=moved), ()
        case GatePassed():
            return _gate_passed(base, event)
        case StepFailed():
            return _step_failed(base, event, now)
        case Restored():
            return _restored(base, event)
        case Blocked():
            hold: Hold = Window(event.until) if event.until is not None else _leased(base.hold, event, now)
            health = _waiting(_before(state))
            return replace(base, health=health, hold=_weaker(base.hold, hold), transaction=None), ()
        case Interrupted():
            if event.touched or _touched(state):
                back = restore_target(state)
                effects: tuple[Effect, ...] = (RestoreHealthy(back, wait=False),) if back is not None else ()
                after = replace(base, health=LaneHealth.PROGRESSING, transaction=None, serving=event.restarted)
                return after, effects
            return replace(base, health=_kept(_before(state)), transaction=None), ()
        case Preempted():
            if event.touched or _touched(state):
                # The newest spec follows at once: the old one is not put back, the new ranks stop.
                return replace(base, health=LaneHealth.PROGRESSING, transaction=None, serving=None), (StopNew(),)
            return replace(base, health=_kept(_before(state)), transaction=None), ()
        case Denied():
            return replace(base, health=LaneHealth.DENIED, hold=_lapsed(base.hold), transaction=None), ()
        case PlanFailed():
            health = LaneHealth.DEGRADED if _before(state) in SERVING else LaneHealth.FAILED
            return replace(base, health=health, hold=_lapsed(base.hold), transaction=None), ()
        case Suspended():
            return _suspended(base, event, state, now), ()
        case Resumed():
            return replace(base, hold=base.hold.under if isinstance(base.hold, SuspendedBy) else base.hold), ()
        case Retried():
            return replace(base, hold=_retried(base.hold)), ()
        case Stopped():
            # Nothing runs, so no failed spec is held back any more; a person's suspension stands.
            person = replace(base.hold, under=None) if isinstance(base.hold, SuspendedBy) else None
            return replace(
                base, health=LaneHealth.STOPPED, serving=None, hold=person, transaction=None,
                applied=base.wanted.commit,
            ), ()  # fmt: skip
        case SwapUndone():
            return replace(base, swap_undone=event.undone), ()
        case Internal():
            return replace(base, health=_kept(_before(state)), transaction=None), ()
    raise AssertionError(f"unhandled event {event!r}")  # pragma: no cover - exhaustive match


def next_wake(state: LaneState) -> float | None:
    """When the lane next needs attention without anything new happening (epoch s); None: only news wakes it.

    A backoff's retry, a lease block's next look, a change window's opening, the deadline of the transaction's
    phase. A suspended lane
    has none: the backoff under its suspension waits for the suspension to end.
    """
    times: list[float] = []
    if isinstance(state.hold, Backoff | LeasedBy) and state.hold.at is not None:
        times.append(state.hold.at)
    elif isinstance(state.hold, Window):
        times.append(state.hold.until)
    if state.transaction is not None and state.transaction.deadline is not None:
        times.append(state.transaction.deadline)
    return min(times, default=None)


def restore_target(state: LaneState, fingerprint: str | None = None) -> Serving | None:
    """What a failed (or cut short) transaction puts back: the last healthy spec, unless it has no ranks on record
    or is the very spec that just failed (the same fingerprint at the same commit: starting it again would fail
    again); None: the new ranks are stopped and nothing is restarted in their place."""
    healthy, op = state.healthy, state.transaction
    if healthy is None or not healthy.specs:
        return None
    failing = op.fingerprint if op is not None and op.fingerprint is not None else fingerprint
    if healthy.fingerprint == failing and healthy.commit == (op.commit if op is not None else None):
        return None
    return healthy


# -- the rules ------------------------------------------------------------------------------------------------------


def _before(state: LaneState) -> LaneHealth | None:
    """The health an ending that touched nothing resolves from: from before the transaction, when one is in flight."""
    return state.transaction.before if state.transaction is not None else state.health


def _touched(state: LaneState) -> bool:
    """The transaction in flight has touched ranks (its phase says so, whatever the event's reporter thought)."""
    return state.transaction is not None and state.transaction.touched


def _kept(before: LaneHealth | None) -> LaneHealth:
    """Nothing was done: the health stands; a lane that has none yet cannot be acted on (blocked)."""
    return before if before is not None else LaneHealth.BLOCKED


def _waiting(before: LaneHealth | None) -> LaneHealth:
    """Cannot act now: what served serves; a lane that never served, or whose start was not seen, is blocked."""
    return LaneHealth.BLOCKED if before in {None, LaneHealth.PROGRESSING} else _kept(before)


def _lapsed(hold: Hold | None) -> Hold | None:
    """Holds that last only while the planner says so (a window, a lease) lapse with any other news."""
    if isinstance(hold, Window | LeasedBy):
        return None
    if isinstance(hold, SuspendedBy) and hold.by == LANE_FILE:
        return hold.under  # the file no longer says hands off, or this news would not have come
    return hold


def _leased(current: Hold | None, event: Blocked, now: float) -> LeasedBy:
    """Blocked by a lease again: the wait doubles from the error's own delay (a lane blocked anew starts over)."""
    n = current.n + 1 if isinstance(current, LeasedBy) else 1
    at = now + lease_delay(n, event.delay_s, event.jitter) if event.delay_s > 0 else None
    return LeasedBy(event.by, at, n)


def _weaker(current: Hold | None, new: Hold) -> Hold:
    """A window or a lease never displaces a failed spec's hold or a person's suspension."""
    if current is None or isinstance(current, Window | LeasedBy):
        return new
    if isinstance(current, SuspendedBy) and current.by == LANE_FILE:
        return current.under if current.under is not None else new
    return current


def _retried(hold: Hold | None) -> Hold | None:
    if isinstance(hold, FAILURE_HOLDS):
        return None
    if isinstance(hold, SuspendedBy):
        return replace(hold, under=None)
    return hold


def _failure_hold(hold: Hold | None) -> Condemned | Backoff | None:
    under = hold.under if isinstance(hold, SuspendedBy) else hold
    return under if isinstance(under, Condemned | Backoff) else None


def _observed(state: LaneState, event: Observed) -> LaneState:
    hold = _lapsed(state.hold)
    current = state.health
    match event.seen:
        case Seen.READY:
            # The desired spec held back after it failed, and the last healthy one serves: degraded at best.
            health = LaneHealth.DEGRADED if _failure_hold(hold) is not None else LaneHealth.HEALTHY
            serving = event.fingerprint if event.fingerprint is not None else state.serving
            return replace(state, health=health, hold=hold, serving=serving)
        case Seen.NOT_ANSWERING:
            # A spec whose readiness was never observed stays progressing: the gate decides it, not the resync.
            health = LaneHealth.PROGRESSING if current == LaneHealth.PROGRESSING else LaneHealth.DEGRADED
            return replace(state, health=health, hold=hold)
        case Seen.NOTHING_RUNS:
            return replace(state, health=LaneHealth.STOPPED, hold=hold, serving=None)
        case Seen.UNREACHABLE:
            # What serves can no longer be seen to serve; a lane that served nothing still serves nothing.
            health = LaneHealth.DEGRADED if current in {None, LaneHealth.HEALTHY} else current
            assert health is not None
            return replace(state, health=health, hold=hold)
    raise AssertionError(f"unhandled observation {event.seen}")  # pragma: no cover - exhaustive match


def _started(state: LaneState, event: Started, now: float) -> LaneState:
    failure = _failure_hold(state.hold)
    # Its backoff counts the tries of this very spec; a new spec owes nothing to the last one's failures.
    kept = failure if failure is not None and failure.fingerprint == event.fingerprint else None
    if event.kind == TxKind.RESTORE:
        kept = failure  # the last healthy spec put back: the failed spec stays held as it was
    tx = Transaction(
        event.kind, event.fingerprint, event.commit, event.phase, now, event.deadline, before=_before(state)
    )
    person = isinstance(state.hold, SuspendedBy) and state.hold.by != LANE_FILE
    hold = replace(state.hold, under=kept) if person and isinstance(state.hold, SuspendedBy) else kept
    return replace(state, health=LaneHealth.PROGRESSING, transaction=tx, hold=hold, swap_undone=None)


def _gate_passed(state: LaneState, event: GatePassed) -> Step:
    serving = event.serving
    failure = _failure_hold(state.hold)
    if failure is not None and failure.fingerprint != serving.fingerprint:
        # The last healthy spec put back while the desired one stays held (its drift repaired): degraded.
        return replace(state, health=LaneHealth.DEGRADED, serving=serving.fingerprint, transaction=None), ()
    # Passed: no failure holds it back any more; a person's suspension stands.
    hold = replace(state.hold, under=None) if isinstance(state.hold, SuspendedBy) else None
    done = replace(
        state, health=LaneHealth.HEALTHY, serving=serving.fingerprint, healthy=serving, hold=hold, transaction=None,
        applied=serving.commit if serving.commit is not None else state.applied,
    )  # fmt: skip
    commit = (serving.commit or "")[:12]
    return done, (Announce(AnnounceKind.ROLLED_OUT, f"{serving.fingerprint[:12]} at {commit} passed its gate"),)


def _step_failed(state: LaneState, event: StepFailed, now: float) -> Step:
    op = state.transaction
    if op is not None and op.kind == TxKind.STOP:
        # Some ranks may still run; whatever was known of the lane stands.
        before = op.before
        return replace(state, health=before if before is not None else LaneHealth.DEGRADED, transaction=None), ()
    if op is not None and op.kind == TxKind.RESTORE:
        # Putting the last healthy spec back failed: the held spec's hold stays as it was, and the healthy
        # spec is not condemned (it is simply not serving).
        if event.touched or op.touched:
            said = Announce(AnnounceKind.DARK, "the lane serves nothing now")
            return replace(state, health=LaneHealth.FAILED, serving=None, transaction=None), (said,)
        health = LaneHealth.DEGRADED if op.before in SERVING else LaneHealth.FAILED
        return replace(state, health=health, transaction=None), ()
    fingerprint = op.fingerprint if op is not None and op.fingerprint is not None else event.fingerprint
    hold = state.hold if fingerprint is None else _failed_hold(state.hold, fingerprint, event, now)
    # A new failure: a swap the last one undid is behind it (this one's own undo, if any, is said after).
    state = replace(state, swap_undone=None, error=_noted(state.error, hold, event))
    if event.touched or (op is not None and op.touched):
        # The old ranks were stopped (or new ones started): the last healthy spec is put back, if there is one.
        back = restore_target(state, fingerprint)
        effect: Effect = RestoreHealthy(back) if back is not None else StopNew()
        restoring = op if op is not None else Transaction(TxKind.DEPLOY, fingerprint, None, Phase.RESTORING, now)
        restoring = replace(restoring, phase=Phase.RESTORING, deadline=None)
        return replace(state, health=LaneHealth.PROGRESSING, hold=hold, transaction=restoring, serving=None), (effect,)
    before = _before(state)
    if before in SERVING:
        said = Announce(AnnounceKind.KEPT, "nothing was stopped; the old spec still serves")
        health = LaneHealth.DEGRADED
    else:
        said, health = Announce(AnnounceKind.DARK, "nothing was stopped, and nothing served"), LaneHealth.FAILED
    return replace(state, health=health, hold=hold, transaction=None), (said,)


def _noted(error: LastError | None, hold: Hold | None, event: StepFailed) -> LastError | None:
    """A passing fault's error says what follows: when it is tried again, or that it is held for good."""
    if error is None or not event.transient:
        return error
    failure = _failure_hold(hold)
    if isinstance(failure, Backoff):
        return replace(
            error, message=f"{error.message} (a passing fault: tried again in {failure.at - error.at:.0f} s)"
        )
    if isinstance(failure, Condemned) and failure.n > 0:
        held = "held until the lane changes or `lanes retry`"
        return replace(error, message=f"{error.message} (a passing fault {failure.n} times in a row: {held})")
    return error


def _failed_hold(current: Hold | None, fingerprint: str, event: StepFailed, now: float) -> Hold:
    """The hold a failure of `fingerprint` leaves: condemned, or a backoff that doubles until the flap limit."""
    failure = _failure_hold(current)
    n = failure.n if failure is not None and failure.fingerprint == fingerprint else 0
    new: Condemned | Backoff
    if not event.transient:
        new = Condemned(fingerprint, n)
    else:
        delay = retry_delay(n + 1, event.delay_s)
        new = Condemned(fingerprint, n + 1) if delay is None else Backoff(fingerprint, now + delay, n + 1)
    if isinstance(current, SuspendedBy) and current.by != LANE_FILE:
        return replace(current, under=new)
    return new


def _restored(state: LaneState, event: Restored) -> Step:
    if event.ok:
        fingerprint = state.healthy.fingerprint if state.healthy is not None else None
        said = Announce(AnnounceKind.ROLLED_BACK, "the last healthy spec serves again")
        return replace(state, health=LaneHealth.DEGRADED, serving=fingerprint, transaction=None), (said,)
    said = Announce(AnnounceKind.DARK, "the lane serves nothing now")
    return replace(state, health=LaneHealth.FAILED, serving=None, transaction=None), (said,)


def _suspended(base: LaneState, event: Suspended, state: LaneState, now: float) -> LaneState:
    under = _failure_hold(state.hold)
    current, why = state.hold, event.why or ""
    # The lane file's reason names what drifted, which may change from one resync to the next.
    same = isinstance(current, SuspendedBy) and current.by == event.by and (event.by == LANE_FILE or current.why == why)
    since = current.since if same and isinstance(current, SuspendedBy) else now
    if isinstance(current, SuspendedBy) and current.by_person and event.by == LANE_FILE:
        # The lane file says hands off too: the person's hold is the one that stands (it outlives the file's).
        return replace(base, health=_kept(state.health), hold=replace(current, under=under))
    hold = SuspendedBy(event.by, why, under, since)
    # lanes does not look after a suspended lane: it says what it last knew, or that it never served.
    return replace(base, health=_kept(state.health), hold=hold)
