"""The `lanes` command line (`reconciler.cli.main`).

This package is imported first on both ways into a command, the `lanes` script and
`python -m reconciler.cli.main`, so it is where the daemon's process declines what it never uses: it writes
JSON lines, yet structlog imports rich, pygments, colorama and better_exceptions when they are installed (its
console renderer's colours and tracebacks), 4.5 MB of the daemon's RSS (issue 27: 150 MB at 1,000 hosts).
A module set to None in `sys.modules` raises ImportError when imported, which is how those imports are
optional to structlog (and to httpx's own command line). Typer is told so too, or its usage errors would
reach for rich.
"""

from __future__ import annotations

import os
import sys

TERMINAL_ONLY = ("rich", "pygments", "colorama", "better_exceptions")
"""Imported for a terminal's sake alone: not in the daemon's process."""

if sys.argv[1:2] == ["daemon"]:
    for _name in TERMINAL_ONLY:
        sys.modules.setdefault(_name, None)  # type: ignore[arg-type]
    os.environ["TYPER_USE_RICH"] = "0"  # read by typer at its import (typer/core.py HAS_RICH)
