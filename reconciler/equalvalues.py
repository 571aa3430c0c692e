"""One object for each distinct string, and for each distinct list or object of plain values, across decoded JSON.

Much of what the daemon holds for many lanes or many hosts repeats: the ranks of 250 lanes repeat keys, flags,
environment pairs, labels and mounts (`reconciler.store.jsoncolumns`); the probe answers of 1,000 hosts repeat
keys, link and device names, states, driver and OS texts (`reconciler.observe.probe`). `json.loads` makes a
new object of each for every document; passed through an `EqualValues` table, equal ones are one object.

The tables are the caller's own, not `sys.intern`'s: interned strings were immortal in early CPython 3.12
releases (python/cpython#113993), and each commit's or host's new values would have been kept for the life of
the daemon. Each caller renews its table in proportion to what it holds, so a table stays bounded.
"""

from __future__ import annotations

from typing import Any


class EqualValues:
    """The table: `value()` returns a decoded JSON value made of the table's objects where equal ones exist."""

    def __init__(self, *, leaves: bool = True) -> None:
        self.strings: dict[str, str] = {}
        self.leaves: dict[tuple[Any, ...], Any] = {}
        self._share_leaves = leaves
        """False for a caller that keeps none of the decoded containers (it builds its own values from them):
        their keys would cost more than they share."""

    def __len__(self) -> int:
        return len(self.strings) + len(self.leaves)

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.strings.setdefault(value, value)
        if isinstance(value, list):
            items = [self.value(v) for v in value]
            key = _leaf_key("l", items) if self._share_leaves else None
            return items if key is None else self.leaves.setdefault(key, items)
        if isinstance(value, dict):
            fields = {self.strings.setdefault(k, k): self.value(v) for k, v in value.items()}
            key = _leaf_key("d", [x for kv in fields.items() for x in kv]) if self._share_leaves else None
            return fields if key is None else self.leaves.setdefault(key, fields)
        return value

    def adopt(self, value: Any) -> None:
        """Take the objects of a value decoded before into the tables as they are (no copies)."""
        if isinstance(value, str):
            self.strings.setdefault(value, value)
        elif isinstance(value, list):
            for v in value:
                self.adopt(v)
            if (key := _leaf_key("l", value)) is not None:
                self.leaves.setdefault(key, value)
        elif isinstance(value, dict):
            for k, v in value.items():
                self.strings.setdefault(k, k)
                self.adopt(v)
            if (key := _leaf_key("d", [x for kv in value.items() for x in kv])) is not None:
                self.leaves.setdefault(key, value)


def _leaf_key(kind: str, items: list[Any]) -> tuple[Any, ...] | None:
    """A key equal for equal containers of plain values only (None for one that holds containers). JSON's true,
    1 and 1.0 are equal in Python, so a value that is not a string is keyed with its type."""
    key: list[Any] = [kind]
    for v in items:
        if isinstance(v, str):
            key.append(v)
        elif v is None or isinstance(v, bool | int | float):
            key.append((type(v), v))
        else:
            return None
    return tuple(key)
