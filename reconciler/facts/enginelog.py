"""The engine's own words in a rank's log: the line(s) that say why it exited, picked out of the noise.

A rank that exits before its port opens leaves a log tail (kept in the journal's `applies.logs`) that
ends in the engine's reason: argparse's `vllm: error: unrecognized arguments: --enable-prefix-cachng`,
a Python exception's last line (`ValueError: ...`), CUDA's `out of memory`. The gate itself only knows
"a rank exited"; people need the sentence the engine printed. This picks it: error lines are kept,
traceback frames, usage banners and progress bars are skipped, and the result is bounded (a few lines,
each cut), since the log is the engine's output, i.e. untrusted bytes.

Pure: it parses text handed in and is used by status, history, the git note, notifications and the
dashboard alike, so all of them quote the same words.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MAX_LINES = 3
"""Distinct lines kept: argparse prints one error line, an exception chain a few."""
MAX_LINE = 300
"""Characters kept of one line (an exception can quote a whole config)."""
MAX_SCAN = 400
"""Lines read from the end of each rank's tail: the reason is at the end, and the tail is untrusted."""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# A docker `--timestamps` prefix or a logging prefix in front of the message ("2026-01-02T03:04:05.123Z ").
_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+")
# What an engine's fatal line looks like. argparse: "PROG: error: MESSAGE" (argparse.ArgumentParser.error
# prints `%(prog)s: error: %(message)s`, CPython Lib/argparse.py); an exception's last traceback line:
# "SomeError: message" (traceback.format_exception_only); logging's "ERROR" level name anywhere in a line
# (vLLM's and SGLang's loggers print "ERROR 01-02 03:04:05 [file.py:12] message").
_ERROR = re.compile(
    r"(?:^|\s)error:\s"
    r"|^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)"
    r"|\bERROR\b"
    r"|\bout of memory\b"
    r"|\bFatal\b|\bFATAL\b|\bCRITICAL\b"
    r"|\bSegmentation fault\b|\bcore dumped\b|\bKilled\b"
)
# Noise around the reason: traceback frames and their source lines (indented), the traceback header,
# argparse's usage banner and its wrapped continuation lines, progress bars.
_NOISE = re.compile(
    r"^(?:Traceback \(most recent call last\)|During handling of the above exception"
    r"|The above exception was the direct cause|usage:|\s)"
    r"|[█▏▎▍▌▋▊▉]|\d+%\|"
)


def _clean(line: str) -> str:
    line = _CONTROL.sub("", _ANSI.sub("", line)).strip()
    return _STAMP.sub("", line)


def rank_reason(log: str) -> list[str]:
    """The error lines of one rank's log tail, oldest first (at most MAX_LINES, each cut at MAX_LINE)."""
    raw = log.splitlines()[-MAX_SCAN:]
    found: list[str] = []
    for original in reversed(raw):
        if not original.strip() or _NOISE.search(_ANSI.sub("", original)):
            continue
        line = _clean(original)
        if line and _ERROR.search(line) and line not in found:
            found.append(line if len(line) <= MAX_LINE else line[: MAX_LINE - 1] + "…")
            if len(found) == MAX_LINES:
                break
    return list(reversed(found))


def engine_words(logs: Mapping[str, str] | None) -> str | None:
    """The engine's reason across a lane's ranks, as one line: the same words from several ranks once.

    `logs` is `{"<container>@<host>": tail}` as the journal keeps it. None when no rank's tail holds an
    error line (a rank that was stopped, not one that failed, prints none).
    """
    if not logs:
        return None
    words: list[str] = []
    for _name, tail in sorted(logs.items()):
        for line in rank_reason(str(tail or "")):
            if line not in words:
                words.append(line)
    if not words:
        return None
    return " | ".join(words[-MAX_LINES:])


def with_engine_words(error: str | None, logs: Mapping[str, str] | None) -> str | None:
    """`error` followed by the engine's own words ("...: a rank exited ...; engine: vllm: error: ...")."""
    words = engine_words(logs)
    if not words or (error and words in error):
        return error
    return f"{error}; engine: {words}" if error else f"engine: {words}"
