"""structlog set-up: readable lines on a terminal, JSON lines otherwise, always on stderr.

For commands stdout belongs to `--json` output, so logs go to stderr; the
daemon logs JSON lines to stdout, which journald stores. Secret values known
to the control node are redacted by a processor before any line is written.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, MutableMapping
from typing import Any, TextIO

import structlog


class Redactor:
    """Replace every known secret value in every event field."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = [s for s in secrets if len(s) >= 6]

    def __call__(self, _logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        if not self.secrets:
            return event
        for key, value in list(event.items()):
            if isinstance(value, str):
                text = value
                for secret in self.secrets:
                    text = text.replace(secret, "[redacted]")
                event[key] = text
        return event


def configure(
    level: str = "WARNING", *, json_lines: bool | None = None, secrets: Iterable[str] = (), stream: TextIO | None = None
) -> None:
    """`stream`: stderr for commands (stdout is theirs), stdout for the daemon (journald reads it)."""
    out = stream
    as_json = (not (out or sys.stderr).isatty()) if json_lines is None else json_lines
    renderer: Any = structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            Redactor(secrets),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        # sys.stderr is looked up at each log call, not bound now: tests (and tools) replace it.
        logger_factory=(lambda *_args: structlog.PrintLogger(file=out or sys.stderr)),
        cache_logger_on_first_use=False,
    )
