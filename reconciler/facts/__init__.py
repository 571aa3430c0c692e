"""Facts: the commands the reconciler sends to a host and the pure parsers of their output.

Pure layer: stdlib only. `commands` builds the argv lists, `parse` reads what
they print, `observed` holds the typed result the planner diffs against.
"""
