"""The one writer of lane state: `record(store, lane, *events)` runs each event through the lane machine
(`reconciler.lane.transition`) and writes the state it ends in as the lane's row.

No other code writes a lane's state (tests/store/test_one_writer.py greps for it): execute, the daemon and
the CLI hand events here. The notes written beside the state (a gate's timings, the drift a repair fixed,
a model being staged, the latest evidence) are facts for people that no transition reads; they are
written here too, by name and type, never as loose fields.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from reconciler.lane import Effect, Event, LaneState, Retried, StepFailed, transition
from reconciler.store.journal import Store
from reconciler.store.lanestate import fields_from_state, state_from_record

BACKOFF_SCALE_ENV = "LANES_TEST_BACKOFF_SCALE"
"""Tests only: a factor on the first wait after a passing fault (0.1: a host fault's 60 s is 6 s), read at each
record, so a test of the daemon trying a spec again on its own waits seconds rather than minutes while every
step of it (the backoff held, its end scheduled, the retry) is the real one. Unset: the errors' own waits."""


def _scaled(event: Event) -> Event:
    raw = os.environ.get(BACKOFF_SCALE_ENV)
    if not raw or not isinstance(event, StepFailed) or not event.delay_s:
        return event
    try:
        scale = float(raw)
    except ValueError:
        return event  # a test knob set wrong must not cost a lane its record
    return replace(event, delay_s=event.delay_s * scale) if 0 < scale <= 1 else event


def current(store: Store, lane: str) -> LaneState:
    """The lane's state as the next transition starts from it.

    A transaction recorded by an earlier process (a daemon killed mid-transaction) is not in flight any more:
    it is dropped, and the lane's health stands as it was left (progressing: the next resync gates it again,
    and the journal's unfinished steps say what was under way).
    """
    return _live(store, state_from_record(store.lane(lane)))


def _live(store: Store, state: LaneState) -> LaneState:
    if state.transaction is not None and state.transaction.started < store.opened:
        state = replace(state, transaction=None)
    return state


def record(
    store: Store,
    lane: str,
    *events: Event,
    now: float | None = None,
    timings: Mapping[str, float] | None = None,
    drift: Mapping[str, Any] | None = None,
    journal: Callable[[LaneState], None] | None = None,
) -> tuple[LaneState, tuple[Effect, ...]]:
    """Apply `events` in order and write the lane's row once; returns the state written and the effects asked.

    `journal` runs with the final state before the row is written: an ending's apply row goes first, so whoever
    sees the lane's new state finds the row that explains it, and a crash between the two loses no history.

    A state equal to the row's (a no-op resync's look at a lane that is as it was) is not written again: the
    row's `updated` is when the lane's state last changed, not when it was last looked at (issue 27: every
    resync wrote every lane's row). When a cycle last looked is the daemon's `/status` `last_cycle`.
    """
    at = time.time() if now is None else now
    rec = store.lane(lane)
    stored = state_from_record(rec)
    state, effects = _live(store, stored), tuple[Effect, ...]()
    for event in events:
        state, more = transition(state, _scaled(event), at)
        effects = (*effects, *more)
    if journal is not None:
        journal(state)
    if rec is not None and state == stored and timings is None and drift is None:
        return state, effects
    fields = fields_from_state(state)
    if timings is not None:
        fields["timings"] = dict(timings)
    if drift is not None:
        fields["drift"] = dict(drift)
    store.update_lane(lane, **fields)
    return state, effects


def retry(store: Store, lane: str) -> bool:
    """`lanes retry`: the condemned spec, and any backoff, no longer hold the lane back; False when none did."""
    state = current(store, lane)
    if store.lane(lane) is None or (state.condemned is None and state.backoff is None):
        return False
    record(store, lane, Retried())
    return True


def note_staging(store: Store, lane: str, staging: Mapping[str, Any] | None) -> None:
    """A model being staged for the lane's next spec ({"model", "hosts": {host: progress}}); None: done."""
    store.update_lane(lane, staging=dict(staging) if staging is not None else None)


def note_evidence(store: Store, lane: str, evidence: Mapping[str, Any]) -> None:
    """The latest evidence headline (pp, tg, file, commit, regression)."""
    store.update_lane(lane, evidence=dict(evidence))
