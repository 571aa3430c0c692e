"""A lane row's JSON columns, decoded once per change of their text, with equal parts shared.

Issue 27 (the daemon's peak RSS at 1,000 hosts): 250 lanes' healthy specs are 1.8 MB of JSON text and
9.1 MB decoded. Every cycle writes each lane's row again (its `updated` time at least), so a record kept
by the whole row was decoded again once a cycle, and for a while the new copy was held beside the old one
(by the records and lane states of the cycle under way). Kept by the column's own text, a spec that did not
change keeps its one decoded value across writes, and its text is shared with the row that holds it.

The objects inside the decoded values are shared too: the ranks of 250 lanes repeat the same keys, flags,
environment pairs, labels, images and mounts, and one object per distinct string, and per distinct list or
object of plain values, holds 2.8 MB where plain `json.loads` held 9.1 MB (`bench/scale.py`'s 250 lanes,
tracemalloc). The table (`reconciler.equalvalues`) is rebuilt from the values still held once as many
values were decoded as are held, so what it keeps stays in proportion to what is held.
"""

from __future__ import annotations

import json
from typing import Any

from reconciler.equalvalues import EqualValues


class JsonColumns:
    """The decoded JSON columns of the rows a store has read, by lane and column."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str], tuple[str, Any]] = {}
        self._shared = EqualValues()
        self._since_rebuild = 0

    def decode(self, lane: str, column: str, text: str) -> tuple[str, Any]:
        """The column's text as kept (equal to `text`, the object the row should hold) and its value, decoded
        when the text changed. Readers never change a decoded value (records are frozen values)."""
        kept = self._kept.get((lane, column))
        if kept is not None and kept[0] == text:
            return kept
        value = self._shared.value(json.loads(text))
        self._kept[(lane, column)] = (text, value)
        self._since_rebuild += 1
        if self._since_rebuild > max(64, len(self._kept)):
            self._rebuild()
        return text, value

    def keep_only(self, lanes: set[str]) -> None:
        """Forget the columns of lanes that have no row any more."""
        for key in [k for k in self._kept if k[0] not in lanes]:
            del self._kept[key]

    def held(self) -> int:
        """How many strings and leaf containers the tables of shared objects hold (for tests)."""
        return len(self._shared)

    def _rebuild(self) -> None:
        shared = EqualValues()
        for _, value in self._kept.values():
            shared.adopt(value)
        self._shared, self._since_rebuild = shared, 0
