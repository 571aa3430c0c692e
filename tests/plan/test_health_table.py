"""Lane health as a table: (health before, outcome) -> health after, for every pair.

The table is written out, not computed, so a change to `next_health` has to change a row here
too, on purpose. `-` is a lane with no record yet.
"""

from __future__ import annotations

import pytest

from reconciler.plan.health import FLAP_LIMIT, LaneHealth, Outcome, next_health, retry_delay

pytestmark = pytest.mark.timeout(10)

TABLE = """
outcome                | -           healthy     progressing degraded    failed      denied      blocked     stopped
observed-ready         | healthy     healthy     healthy     healthy     healthy     healthy     healthy     healthy
observed-not-answering | degraded    degraded    progressing degraded    degraded    degraded    degraded    degraded
held-serving           | degraded    degraded    degraded    degraded    degraded    degraded    degraded    degraded
nothing-runs           | stopped     stopped     stopped     stopped     stopped     stopped     stopped     stopped
started                | progressing progressing progressing progressing progressing progressing progressing progressing
applied                | healthy     healthy     healthy     healthy     healthy     healthy     healthy     healthy
stopped                | stopped     stopped     stopped     stopped     stopped     stopped     stopped     stopped
denied                 | denied      denied      denied      denied      denied      denied      denied      denied
unreachable            | degraded    degraded    progressing degraded    failed      denied      blocked     stopped
waiting                | blocked     healthy     blocked     degraded    failed      denied      blocked     stopped
failed-untouched       | failed      degraded    failed      degraded    failed      failed      failed      failed
rolled-back            | degraded    degraded    degraded    degraded    degraded    degraded    degraded    degraded
rollback-failed        | failed      failed      failed      failed      failed      failed      failed      failed
interrupted            | progressing progressing progressing progressing progressing progressing progressing progressing
interrupted-untouched  | blocked     healthy     progressing degraded    failed      denied      blocked     stopped
stop-failed            | degraded    healthy     progressing degraded    failed      denied      blocked     stopped
internal-error         | blocked     healthy     progressing degraded    failed      denied      blocked     stopped
suspended              | blocked     healthy     progressing degraded    failed      denied      blocked     stopped
"""


def _rows() -> list[tuple[LaneHealth | None, Outcome, LaneHealth]]:
    lines = list(TABLE.strip().splitlines())
    header = lines[0].split("|")[1].split()
    befores = [None if h == "-" else LaneHealth(h) for h in header]
    cases = []
    for line in lines[1:]:
        outcome, afters = line.split("|")
        for before, after in zip(befores, afters.split(), strict=True):
            cases.append((before, Outcome(outcome.strip()), LaneHealth(after)))
    return cases


ROWS = _rows()


def test_the_table_covers_every_state_and_outcome() -> None:
    pairs = {(before, outcome) for before, outcome, _ in ROWS}
    assert pairs == {(b, o) for b in [None, *LaneHealth] for o in Outcome}


@pytest.mark.parametrize(("before", "outcome", "after"), ROWS, ids=str)
def test_next_health(before: LaneHealth | None, outcome: Outcome, after: LaneHealth) -> None:
    assert next_health(before, outcome) == after


def test_backoff_doubles_then_condemns_at_the_flap_limit() -> None:
    delays = [retry_delay(n, 30.0) for n in range(1, FLAP_LIMIT + 1)]
    assert delays[: FLAP_LIMIT - 1] == [30.0 * 2**i for i in range(FLAP_LIMIT - 1)]
    assert delays[-1] is None
