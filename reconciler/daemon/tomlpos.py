"""Which line of a TOML file a validation error is about.

tomllib reports positions only for syntax errors; pydantic reports a key path
(`("repo", "fetch_interval_s")`). This maps a key path back to the line that
sets it, or to the header of its table when the key is missing, so a person
is sent to the right line. It is a line scanner, not a TOML parser: it only
has to recognise table headers and `key =` / `a.b =` assignments. The
error's wording is settled here too (`describe_error`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_HEADER = re.compile(r"^\s*\[\[?\s*(.+?)\s*\]\]?\s*(?:#.*)?$")
_PART = r"""(?:"(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_-]+)"""
_ASSIGN = re.compile(rf"^\s*({_PART}(?:\s*\.\s*{_PART})*)\s*=")
_KEY_PART = re.compile(r"""\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([A-Za-z0-9_-]+))\s*(?:\.|$)""")


def _split_key(text: str) -> tuple[str, ...]:
    parts = []
    for m in _KEY_PART.finditer(text):
        part = m.group(1) if m.group(1) is not None else (m.group(2) if m.group(2) is not None else m.group(3))
        if part is not None:
            parts.append(part)
    return tuple(parts)


def key_lines(text: str) -> list[tuple[tuple[str, ...], int]]:
    """Every table header and key assignment with its full dotted path and 1-based line."""
    out: list[tuple[tuple[str, ...], int]] = []
    table: tuple[str, ...] = ()
    in_multiline = False
    for number, line in enumerate(text.splitlines(), 1):
        quotes = line.count('"""') + line.count("'''")
        if in_multiline:
            in_multiline = quotes % 2 == 0
            continue
        header = _HEADER.match(line)
        if header and "=" not in line.split("]")[0]:
            table = _split_key(header.group(1))
            out.append((table, number))
        else:
            assign = _ASSIGN.match(line)
            if assign:
                out.append((table + _split_key(assign.group(1)), number))
        if quotes % 2 == 1:
            in_multiline = True
    return out


def line_of(text: str, loc: tuple[str | int, ...]) -> int | None:
    """The line that best matches a validation location: the key itself, else its table's header."""
    want = tuple(str(p) for p in loc)
    best: tuple[int, int | None] = (0, None)
    for path, number in key_lines(text):
        common = 0
        for a, b in zip(path, want, strict=False):
            if a != b:
                break
            common += 1
        if common > best[0]:
            best = (common, number)
    return best[1]


TOML_POS = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")


def describe_error(error: Mapping[str, Any], model_fields: Mapping[str, Any] | None) -> str:
    """One pydantic error in words a person editing the file understands."""
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        allowed = f" (allowed: {', '.join(sorted(model_fields))})" if model_fields else ""
        return f"unknown key{allowed}"
    if kind == "missing":
        return "required key is missing"
    message = str(error.get("msg", "invalid value"))
    return message.removeprefix("Value error, ")
