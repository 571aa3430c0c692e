"""A lane row's JSON columns, decoded once per change of their text, with equal parts shared.

Issue 27 (the daemon's peak RSS at 1,000 hosts): 250 lanes' healthy specs are 1.8 MB of JSON text and
9.1 MB decoded. Every cycle writes each lane's row again (its `updated` time at least), so a record kept
by the whole row was decoded again once a cycle, and for a while the new copy was held beside the old one
(by the records and lane states of the cycle under way). Kept by the column's text key (`text_key`: a long
text by its length and hash), a spec that did not change keeps its one decoded value across writes, and no
copy of its text is held (the 1.9 MB of text were held beside the values until issue 27's last part).

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

TextKey = tuple[int, int] | str
"""What identifies a text without holding it: a long one by its length and hash, a short one by itself."""

KEYED_BY_HASH = 256
"""Texts longer than this are kept by (length, hash). Python's str hash is keyed per process (SipHash with a
random key, PEP 456), so a committer cannot write two different specs that the store would take for one."""


def text_key(text: str) -> TextKey:
    return (len(text), hash(text)) if len(text) > KEYED_BY_HASH else text


class JsonColumns:
    """The decoded JSON columns of the rows a store has read, by lane and column."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str], tuple[TextKey, Any]] = {}
        self._shared = EqualValues()
        self._since_rebuild = 0

    def decode(self, lane: str, column: str, text: str) -> Any:
        """The column's value, decoded when its text changed. Readers never change a decoded value (records
        are frozen values)."""
        key = text_key(text)
        kept = self._kept.get((lane, column))
        if kept is not None and kept[0] == key:
            return kept[1]
        value = self._shared.value(json.loads(text))
        self._kept[(lane, column)] = (key, value)
        self._since_rebuild += 1
        if self._since_rebuild > max(64, len(self._kept)):
            self._rebuild()
        return value

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
