"""structlog set-up: readable lines on a terminal, JSON lines otherwise, always on stderr.

For commands stdout belongs to `--json` output, so logs go to stderr; the
daemon logs JSON lines to stdout, which journald stores. Secret values known
to the control node are redacted by a processor before any line is written.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, TextIO

import structlog


class Redactor:
    """Replace every known secret value in every event field, however deeply nested.

    An event may carry dicts and lists (a command's argv, a response body),
    and an exception's text may quote what failed; all of it is rewritten.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = [s for s in secrets if len(s) >= 6]

    def __call__(self, _logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        if not self.secrets:
            return event
        for key, value in list(event.items()):
            event[key] = self._clean(value)
        return event

    def _clean(self, value: Any) -> Any:
        if isinstance(value, str):
            for secret in self.secrets:
                value = value.replace(secret, "[redacted]")
            return value
        if isinstance(value, Mapping):
            return {self._clean(k): self._clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple, set, frozenset)):
            return [self._clean(v) for v in value]
        if isinstance(value, BaseException):
            return self._clean(f"{type(value).__name__}: {value}")
        return value


def configure(
    level: str = "WARNING", *, json_lines: bool | None = None, secrets: Iterable[str] = (), stream: TextIO | None = None
) -> None:
    """`stream`: stderr for commands (stdout is theirs), stdout for the daemon (journald reads it)."""
    out = stream
    as_json = (not (out or sys.stderr).isatty()) if json_lines is None else json_lines
    renderer: Any = structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=False)
    redactor = Redactor(secrets)
    _route_library_logs(out, redactor, renderer)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redactor,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        # sys.stderr is looked up at each log call, not bound now: tests (and tools) replace it.
        logger_factory=(lambda *_args: structlog.PrintLogger(file=out or sys.stderr)),
        cache_logger_on_first_use=False,
    )


class _LibraryLogHandler(logging.Handler):
    """Writes stdlib records (asyncssh, apscheduler, httpx) as our lines; the stream is looked up per record."""

    def __init__(self, out: TextIO | None) -> None:
        super().__init__(logging.WARNING)
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        try:
            (self.out or sys.stderr).write(self.format(record) + "\n")
        except Exception:  # a log line must never take the process down
            self.handleError(record)


def _route_library_logs(out: TextIO | None, redactor: Redactor, renderer: Any) -> None:
    """Libraries log through stdlib logging; without this their warnings reach stderr unredacted and unformatted.

    Only warnings and above: at info asyncssh writes a line per channel, which would drown the daemon's own.
    """
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _LibraryLogHandler)]:
        root.removeHandler(handler)
    handler = _LibraryLogHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.stdlib.add_logger_name,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.format_exc_info,
                redactor,
            ],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root.addHandler(handler)
    if root.level > logging.WARNING or root.level == logging.NOTSET:
        root.setLevel(logging.WARNING)
