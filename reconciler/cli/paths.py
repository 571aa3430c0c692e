"""Where the CLI's commands look for lanes' local files when no option names them.

One place, so that `lanes check`, `plan`, `history`, `upstream` and `allow-rewind` read the same journal
and mirrors; and a module of its own with no imports of lanes, so that a command needing only these
paths (`lanes check`) does not import another command's whole machinery to learn them.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_DB = Path(".lanes/lanes.db")
"""The sqlite journal `lanes apply` writes and the daemon keeps (its `[paths] db` in a service install)."""
UPSTREAM_DATA = Path(".lanes/upstream")
"""The upstream store and git-head mirrors `lanes upstream` keeps (known issues' fix ancestry reads them)."""
