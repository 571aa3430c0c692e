"""store: the sqlite journal, lane records and apply history on the control node."""

from reconciler.store.journal import LaneRecord, Store

__all__ = ["LaneRecord", "Store"]
