"""Regular expressions written in state, compiled with a linear-time engine.

A committer writes `tag_filter` (state/upstreams.yaml) and the secrets rule's `value_patterns`
(policies/rules.yaml); Python's `re` backtracks, so `^(a+)+$` against a 31-character tag takes longer
than systemd's watchdog gives the daemon. RE2 (google-re2) matches in time linear in the input and
refuses what it cannot do in linear time (backreferences, lookaround), so a pattern that compiles here
cannot stall the event loop. Patterns are checked when the file is loaded: a bad one is the committer's
error, named by file, line and field, never a crash in the upstream job.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Protocol

import re2  # type: ignore[import-untyped]  # google-re2 ships no type information

MAX_PATTERN_CHARS = 512
"""A tag filter or a credential pattern is a line, not a program; RE2's own memory cap bounds the rest."""

MAX_PROGRAM_MEM = 1 << 20
"""RE2's `max_mem` for one pattern: `x{1000}{1000}` and friends fail to compile instead of eating memory."""


class SafePattern(Protocol):
    """The part of a compiled pattern lanes uses (RE2's object has the same methods as `re.Pattern`)."""

    pattern: str

    def search(self, text: str) -> Any: ...


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # else RE2 writes its own line to stderr for every refused pattern
    options.max_mem = MAX_PROGRAM_MEM
    return options


def check_pattern(pattern: str) -> str | None:
    """Why `pattern` cannot be used (too long, or not in RE2's linear-time syntax), or None."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"is {len(pattern)} characters long; a pattern is limited to {MAX_PATTERN_CHARS}"
    try:
        re2.compile(pattern, _options())
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        return (
            f"is not a regular expression lanes can run in linear time ({text}); RE2 syntax: "
            "no backreferences or lookaround"
        )
    return None


@lru_cache(maxsize=256)
def compile_pattern(pattern: str) -> SafePattern:
    """The pattern compiled by RE2; ValueError with `check_pattern`'s reason when it cannot be."""
    why = check_pattern(pattern)
    if why is not None:
        raise ValueError(f"{pattern[:80]!r} {why}")
    compiled: SafePattern = re2.compile(pattern, _options())
    return compiled
