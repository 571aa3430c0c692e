"""The `lanes` command line (`reconciler.cli.main`).

This package is imported first on both ways into a command, the `lanes` script and
`python -m reconciler.cli.main`, so it is where a process declines what it never uses. structlog imports
rich, pygments, colorama and better_exceptions when they are installed, for its console renderer's colours
and rich tracebacks, and lanes uses neither (its console lines are colourless, their tracebacks plain:
`logsetup.configure`). A module set to None in `sys.modules` raises ImportError when imported, which is how
those imports are optional to structlog (and to httpx's own command line). The daemon's process never
imports them (4.5 MB of its RSS, issue 27: 150 MB at 1,000 hosts); typer is told so too, or its usage errors
would reach for rich. Any other command hides them only while structlog is imported (about 70 ms of
`lanes check`'s second, issue 27), as its tables and help do use rich.
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
elif "structlog" not in sys.modules:
    _hidden = [name for name in TERMINAL_ONLY if name not in sys.modules]
    for _name in _hidden:
        sys.modules[_name] = None  # type: ignore[assignment]
    try:
        import structlog  # noqa: F401 - imported now, without them
    finally:
        for _name in _hidden:
            if sys.modules.get(_name, False) is None:
                del sys.modules[_name]
