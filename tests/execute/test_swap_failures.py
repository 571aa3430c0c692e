"""Which lanes' failures undid a swap is a field of their record, never a sentence in their last error."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconciler.execute.swap import SWAP_ROLLED_BACK
from reconciler.plan.known import known
from reconciler.store.lanerecord import LaneRecord
from reconciler.store.lanestate import state_from_record

pytestmark = pytest.mark.timeout(10)

BLANK = LaneRecord("x", "running", "degraded", None, None, (), None, None, None, [], None, 0.0, {}, {})


def swap_failures(records: list[LaneRecord], undoing: frozenset[str] = frozenset()) -> frozenset[str]:
    """What the planner reads as lanes whose failure undid a swap (`reconciler.plan.known`)."""
    return known({r.name: state_from_record(r) for r in records}, undoing=undoing).swapped


def test_the_swap_undone_field_decides_and_the_words_do_not() -> None:
    worded = replace(BLANK, name="worded", last_error=f"gate failed; {SWAP_ROLLED_BACK}: a serves again")
    marked = replace(BLANK, name="marked", last_error="said otherwise", swap_undone=f"{SWAP_ROLLED_BACK}: b back")
    plain = replace(BLANK, name="plain", last_error="gate failed")
    assert swap_failures([worded, marked, plain]) == frozenset({"marked"})


def test_the_taking_lanes_of_an_undo_still_pending_count_too() -> None:
    # The journal's swap marks name them (cycle.py reads `pending_restores`); no state says so yet.
    assert swap_failures([BLANK], frozenset({"taker"})) == frozenset({"taker"})
