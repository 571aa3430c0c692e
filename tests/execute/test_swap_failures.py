"""Which lanes' failures undid a swap is a field of their record, never a sentence in their last error."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconciler.execute.swap import SWAP_ROLLED_BACK, swap_failures
from reconciler.store.lanerecord import LaneRecord

pytestmark = pytest.mark.timeout(10)

BLANK = LaneRecord("x", "running", "degraded", None, None, (), None, None, None, [], None, 0.0, {}, {})


def test_the_swap_undone_field_decides_and_the_words_do_not() -> None:
    worded = replace(BLANK, name="worded", last_error=f"gate failed; {SWAP_ROLLED_BACK}: a serves again")
    marked = replace(BLANK, name="marked", last_error="said otherwise", swap_undone=f"{SWAP_ROLLED_BACK}: b back")
    plain = replace(BLANK, name="plain", last_error="gate failed")
    assert swap_failures([worded, marked, plain]) == frozenset({"marked"})


def test_the_taking_lanes_of_an_undo_still_pending_count_too() -> None:
    pending = {"giver": {"taking": ["taker"], "hosts": ["dgx1"]}}
    assert swap_failures([BLANK], pending) == frozenset({"taker"})
