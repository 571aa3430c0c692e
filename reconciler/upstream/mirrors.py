"""Where a git-head source's mirror lives under the upstream data folder.

Apart from the poller (`githead.py`, which needs the HTTP client and the store), so that what only reads
the mirrors (`ancestry.py`, for `lanes check`) finds them without importing how they are fetched.
"""

from __future__ import annotations

import re
from pathlib import Path

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")
"""A source's name as a file name: anything else becomes `_` (no separator, no `..` component)."""


def mirror_path(data_dir: Path, source: str) -> Path:
    return data_dir / "mirrors" / f"{_SAFE_NAME.sub('_', source)}.git"
