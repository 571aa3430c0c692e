"""Lane health as a table: (health before, event) -> health after, for every health and every kind of event.

The health half of the lane machine (tests/lane/test_machine_table.py has the whole state), kept as the table
`next_health` had (tests/plan/test_health_table.py before issue 23), its rows named by the machine's events:
a lane with that health and nothing else on its record (no hold, no transaction), but for `observed-ready-held`
(the desired spec is condemned while the last healthy one answers) and `stop-failed` (a stop in flight fails).
`-` is a lane with no record yet. Written out, not computed: a change to the machine changes a row on purpose.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconciler.lane import (
    Blocked,
    Condemned,
    Denied,
    Event,
    GatePassed,
    Internal,
    Interrupted,
    LaneHealth,
    LaneState,
    Observed,
    Phase,
    PlanFailed,
    Preempted,
    Restored,
    Seen,
    Serving,
    Started,
    StepFailed,
    Stopped,
    Suspended,
    Transaction,
    TxKind,
    events,
    transition,
)
from reconciler.lane.state import LANE_FILE

pytestmark = pytest.mark.timeout(10)

TABLE = """
event                  | -           healthy     progressing degraded    failed      denied      blocked     stopped
observed-ready         | healthy     healthy     healthy     healthy     healthy     healthy     healthy     healthy
observed-not-answering | degraded    degraded    progressing degraded    degraded    degraded    degraded    degraded
observed-ready-held    | degraded    degraded    degraded    degraded    degraded    degraded    degraded    degraded
observed-nothing-runs  | stopped     stopped     stopped     stopped     stopped     stopped     stopped     stopped
started                | progressing progressing progressing progressing progressing progressing progressing progressing
gate-passed            | healthy     healthy     healthy     healthy     healthy     healthy     healthy     healthy
stopped                | stopped     stopped     stopped     stopped     stopped     stopped     stopped     stopped
denied                 | denied      denied      denied      denied      denied      denied      denied      denied
observed-unreachable   | degraded    degraded    progressing degraded    failed      denied      blocked     stopped
blocked                | blocked     healthy     blocked     degraded    failed      denied      blocked     stopped
plan-failed            | failed      degraded    failed      degraded    failed      failed      failed      failed
restored               | degraded    degraded    degraded    degraded    degraded    degraded    degraded    degraded
restore-failed         | failed      failed      failed      failed      failed      failed      failed      failed
interrupted-touched    | progressing progressing progressing progressing progressing progressing progressing progressing
interrupted-untouched  | blocked     healthy     progressing degraded    failed      denied      blocked     stopped
preempted-touched      | progressing progressing progressing progressing progressing progressing progressing progressing
preempted-untouched    | blocked     healthy     progressing degraded    failed      denied      blocked     stopped
stop-failed            | degraded    healthy     progressing degraded    failed      denied      blocked     stopped
internal               | blocked     healthy     progressing degraded    failed      denied      blocked     stopped
suspended              | blocked     healthy     progressing degraded    failed      denied      blocked     stopped
"""

EVENTS: dict[str, Event] = {
    "observed-ready": Observed(seen=Seen.READY),
    "observed-not-answering": Observed(seen=Seen.NOT_ANSWERING),
    "observed-ready-held": Observed(seen=Seen.READY),
    "observed-nothing-runs": Observed(seen=Seen.NOTHING_RUNS),
    "started": Started(kind=TxKind.DEPLOY, fingerprint="new", commit="beef00"),
    "gate-passed": GatePassed(serving=Serving("new")),
    "stopped": Stopped(),
    "denied": Denied(),
    "observed-unreachable": Observed(seen=Seen.UNREACHABLE),
    "blocked": Blocked(by="lanes@other"),
    "plan-failed": PlanFailed(),
    "restored": Restored(ok=True),
    "restore-failed": Restored(ok=False),
    "interrupted-touched": Interrupted(touched=True),
    "interrupted-untouched": Interrupted(touched=False),
    "preempted-touched": Preempted(touched=True),
    "preempted-untouched": Preempted(touched=False),
    "stop-failed": StepFailed(touched=True, transient=False),
    "internal": Internal(),
    "suspended": Suspended(by=LANE_FILE),
}
ON_RECORD_ONLY = {"Progressed", "SwapUndone", "Resumed", "Retried"}
"""Events that are not news about health (a phase, a note, a hold lifted): no row here (they are in
tests/lane/test_machine_table.py)."""


def _state(before: LaneHealth | None, event: str) -> LaneState:
    state = LaneState(health=before)
    if event == "observed-ready-held":
        return replace(state, hold=Condemned("new"))
    if event == "stop-failed":
        return replace(state, transaction=Transaction(TxKind.STOP, None, None, Phase.STOPPING, 0.0, before=before))
    return state


def _rows() -> list[tuple[LaneHealth | None, str, LaneHealth]]:
    lines = list(TABLE.strip().splitlines())
    header = lines[0].split("|")[1].split()
    befores = [None if h == "-" else LaneHealth(h) for h in header]
    cases = []
    for line in lines[1:]:
        event, afters = line.split("|")
        for before, after in zip(befores, afters.split(), strict=True):
            cases.append((before, event.strip(), LaneHealth(after)))
    return cases


ROWS = _rows()


def test_the_table_covers_every_health_and_event() -> None:
    assert {(before, event) for before, event, _ in ROWS} == {(b, e) for b in [None, *LaneHealth] for e in EVENTS}
    named = {type(e).__name__ for e in EVENTS.values()}
    every = {
        t.__name__ for t in vars(events).values() if isinstance(t, type) and issubclass(t, Event) and t is not Event
    }
    assert every - named == ON_RECORD_ONLY
    assert {e.seen for e in EVENTS.values() if isinstance(e, Observed)} == set(Seen)


@pytest.mark.parametrize(("before", "event", "after"), ROWS, ids=str)
def test_health_after(before: LaneHealth | None, event: str, after: LaneHealth) -> None:
    state, _ = transition(_state(before, event), EVENTS[event], 0.0)
    assert state.health == after
