"""store: the sqlite journal, lane records and apply history on the control node.

`Store` and `LaneRecord` are imported from here on first use, not with the package: a module of it that
needs no journal (`store/preflight.py` read by `lanes check`) must not pay for sqlite-utils.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reconciler.lazynames import names_from

if TYPE_CHECKING:
    from reconciler.store.journal import LaneRecord, Store

__all__ = ["LaneRecord", "Store"]


__getattr__ = names_from(__name__, dict.fromkeys(__all__, "reconciler.store.journal"))
