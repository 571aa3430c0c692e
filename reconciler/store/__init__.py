"""store: the sqlite journal, lane records and apply history on the control node.

`Store` and `LaneRecord` are imported from here on first use, not with the package: a module of it that
needs no journal (`store/preflight.py` read by `lanes check`) must not pay for sqlite-utils.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reconciler.store.journal import LaneRecord, Store

__all__ = ["LaneRecord", "Store"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from reconciler.store import journal

        return getattr(journal, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
