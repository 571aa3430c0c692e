"""structlog set-up: readable lines on a terminal, JSON lines otherwise, always on stderr.

For commands stdout belongs to `--json` output, so logs go to stderr; the
daemon logs JSON lines to stdout, which journald stores. Secret values known
to the control node are redacted by a processor before any line is written.

The values are one process-wide set (`remember_secrets`): the daemon loads it
at start and again on SIGHUP, and every secret read at apply time is added as
it is read, so `lanes apply` and the other commands redact what they used.
`redact(text)` serves what is stored rather than logged (log tails in sqlite),
and `redact_stdio` wraps stdout and stderr so what commands print is redacted too.

Length: any non-empty value is redacted. A value of 6 characters or more is
replaced wherever it occurs; a shorter one only where it stands as a whole
word (not inside a longer run of letters and digits), so a 2-character value
such as `ab` does not blank every word that holds those letters, while
`TOKEN=ab`, `"ab"` or `ab` alone are still hidden.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, TextIO

import structlog

SUBSTRING_MIN = 6
"""Values at least this long are replaced wherever they occur; shorter ones only as whole words."""
MASK = "[redacted]"


class _Known:
    """The process-wide set of secret values, and the patterns that find the short ones."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.long: tuple[str, ...] = ()
        self.short: re.Pattern[str] | None = None
        self.values: set[str] = set()

    def add(self, values: Iterable[str]) -> None:
        fresh = {v for v in (v.strip() for v in values) if v} - self.values
        if not fresh:
            return
        with self.lock:
            self.values |= fresh
            # Longest first: a value that contains another is replaced whole.
            self.long = tuple(sorted((v for v in self.values if len(v) >= SUBSTRING_MIN), key=len, reverse=True))
            short = sorted((v for v in self.values if len(v) < SUBSTRING_MIN), key=len, reverse=True)
            self.short = (
                re.compile(r"(?<![A-Za-z0-9])(?:" + "|".join(map(re.escape, short)) + r")(?![A-Za-z0-9])")
                if short
                else None
            )

    def clear(self) -> None:
        with self.lock:
            self.values = set()
            self.long = ()
            self.short = None

    def redact(self, text: str) -> str:
        for secret in self.long:
            if secret in text:
                text = text.replace(secret, MASK)
        if self.short is not None:
            text = self.short.sub(MASK, text)
        return text


_KNOWN = _Known()


def remember_secrets(values: Iterable[str]) -> None:
    """Add secret values to the process-wide set (never removed: a value may still be in flight)."""
    _KNOWN.add(values)


def forget_secrets() -> None:
    """Tests only: start from an empty set."""
    _KNOWN.clear()


def redact(text: str) -> str:
    """`text` with every known secret value replaced (for what is stored, not logged)."""
    return _KNOWN.redact(text)


class Redactor:
    """Replace every known secret value in every event field, however deeply nested.

    An event may carry dicts and lists (a command's argv, a response body),
    and an exception's text may quote what failed; all of it is rewritten.
    The values are the process-wide set; `secrets` given here are added to it.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        remember_secrets(secrets)

    def __call__(self, _logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        if not _KNOWN.values:
            return event
        for key, value in list(event.items()):
            event[key] = self._clean(value)
        return event

    def _clean(self, value: Any) -> Any:
        if isinstance(value, str):
            return _KNOWN.redact(value)
        if isinstance(value, Mapping):
            return {self._clean(k): self._clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple, set, frozenset)):
            return [self._clean(v) for v in value]
        if isinstance(value, BaseException):
            return self._clean(f"{type(value).__name__}: {value}")
        return value


class RedactingStream:
    """A text stream that redacts known secret values from what is written to it (stdout, stderr of commands)."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        self._inner.write(_KNOWN.redact(text) if _KNOWN.values else text)
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def redact_stdio() -> None:
    """Wrap sys.stdout and sys.stderr (once) so a command's printed output is redacted like its logs."""
    if not isinstance(sys.stdout, RedactingStream):
        sys.stdout = RedactingStream(sys.stdout)
    if not isinstance(sys.stderr, RedactingStream):
        sys.stderr = RedactingStream(sys.stderr)


PRIORITIES = {"debug": 7, "info": 6, "warning": 4, "warn": 4, "error": 3, "exception": 3, "critical": 2}
"""Log level -> syslog priority, the `<N>` prefix journald reads off a stream line (sd-daemon(3): SD_ERR is
"<3>", SD_WARNING "<4>", SD_INFO "<6>", SD_DEBUG "<7>"; systemd src/systemd/sd-daemon.h)."""


def to_journal(stream: TextIO, env: Mapping[str, str] | None = None) -> bool:
    """Whether `stream` is the journal: JOURNAL_STREAM ("DEV:INODE", set by systemd for a unit whose output
    goes to journald, systemd.exec(5)) names the very file this stream writes to."""
    value = (os.environ if env is None else env).get("JOURNAL_STREAM", "")
    dev, sep, ino = value.partition(":")
    if not sep or not dev.isdigit() or not ino.isdigit():
        return False
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):  # no descriptor (a StringIO, a closed file)
        return False
    return (st.st_dev, st.st_ino) == (int(dev), int(ino))


class PriorityPrefix:
    """Renders with `inner`, then puts the line's journald priority in front of it (`<6>{"event": ...}`)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(self, logger: Any, name: str, event: MutableMapping[str, Any]) -> str:
        priority = PRIORITIES.get(str(event.get("level") or name).lower(), 6)
        return f"<{priority}>{self.inner(logger, name, event)}"


def configure(
    level: str = "WARNING", *, json_lines: bool | None = None, secrets: Iterable[str] = (), stream: TextIO | None = None
) -> None:
    """`stream`: stderr for commands (stdout is theirs), stdout for the daemon (journald reads it)."""
    out = stream
    as_json = (not (out or sys.stderr).isatty()) if json_lines is None else json_lines
    # Plain tracebacks on a console: structlog's default with rich installed prints every frame's locals,
    # which may hold what the redactor never sees (it reads the event's fields, not a rendered traceback).
    console = structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback)
    renderer: Any = structlog.processors.JSONRenderer() if as_json else console
    if to_journal(out or sys.stderr):
        renderer = PriorityPrefix(renderer)  # journalctl -p err then finds the daemon's errors
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
