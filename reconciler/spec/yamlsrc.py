"""Parse YAML blobs and validate them into models, naming file, line and field.

A person who pushed a bad lane file needs `state/lanes/x.yaml:12: hosts[2]:
...`, not a traceback; ruamel's round-trip nodes remember where every key
sits, so validation errors are mapped back to lines here.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from reconciler.errors import InputError
from reconciler.spec.yamlfast import load_safe

MAX_FILE_BYTES = 1 << 20
"""State files are small; a bigger one is a mistake or an attack."""

MAX_NODES = 200_000
"""Aliases can expand a tiny file into a huge tree ("billion laughs")."""

M = TypeVar("M", bound=BaseModel)


@dataclass
class YamlDoc:
    """A parsed file: the plain value for validation, and line numbers on demand.

    The C loader is about ten times faster than the round-trip one, which
    matters for fleets of a thousand lanes; only a file with an error is
    parsed again in round-trip mode to find the line to name.
    """

    path: str
    text: str
    value: Any
    _rt: Any = field(default=None, repr=False)

    def line(self, loc: Sequence[str | int]) -> int | None:
        if self._rt is None:
            try:
                self._rt = _load(self.text, typ="rt")
            except YAMLError:
                return None
        return line_of(self._rt, loc)


def _load(text: str, *, typ: str) -> Any:
    if typ == "safe":
        return load_safe(text)  # the loader made once, plain documents built directly (`yamlfast`)
    return YAML(typ="rt").load(io.StringIO(text))


def parse_yaml(path: str, data: bytes) -> YamlDoc:
    """Parse one YAML document; line information is recovered only when needed."""
    if len(data) > MAX_FILE_BYTES:
        raise InputError(f"file is {len(data)} bytes; state files are limited to {MAX_FILE_BYTES}", file=path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", file=path) from None
    try:
        value = _load(text, typ="safe")
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"invalid YAML: {problem}", file=path, line=line) from None
    except (RecursionError, ValueError, TypeError) as exc:
        raise InputError(f"invalid YAML: {exc}", file=path) from None
    _count_nodes(value, path)
    return YamlDoc(path, text, value)


MAX_DEPTH = 64
"""State files are a few levels deep; thousands of nested brackets are an attack on the parser's stack."""


def _count_nodes(doc: Any, path: str) -> None:
    # An alias is counted each time it is used: that is how a tiny file expands.
    stack: list[tuple[Any, int]] = [(doc, 0)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise InputError(f"document expands to more than {MAX_NODES} nodes (aliases?)", file=path)
        if depth > MAX_DEPTH:
            raise InputError(f"document is nested more than {MAX_DEPTH} levels deep", file=path)
        if isinstance(node, Mapping):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


def line_of(doc: Any, loc: Sequence[str | int]) -> int | None:
    """The 1-based line of the deepest part of `loc` present in the document."""
    node = doc
    line: int | None = None
    for part in loc:
        if isinstance(node, CommentedMap) and part in node:
            with contextlib.suppress(KeyError, TypeError, IndexError):
                line = node.lc.key(part)[0] + 1
            node = node[part]
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
            with contextlib.suppress(KeyError, TypeError, IndexError):
                line = node.lc.item(part)[0] + 1
            node = node[part]
        else:
            break
    if line is None and isinstance(doc, CommentedMap | CommentedSeq):
        line = doc.lc.line + 1 if doc.lc.line is not None else None
    return line


def field_path(loc: Sequence[str | int]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def to_plain(node: Any) -> Any:
    """Round-trip nodes to plain Python values for pydantic (strict types)."""
    if isinstance(node, Mapping):
        return {(str(k) if not isinstance(k, str | int | float | bool) else k): to_plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [to_plain(v) for v in node]
    if isinstance(node, bool):
        return bool(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    if node is None:
        return None
    # Dates, timestamps and tagged scalars: keep their text so the model can reject or read them.
    return str(node)


def validate(model: type[M], doc: YamlDoc, *, defaults: Mapping[str, Any] | None = None) -> M:
    """Validate a parsed document into `model`, or raise InputError at the first error."""
    path = doc.path
    value = doc.value if doc.value is not None else {}
    if not isinstance(value, Mapping):
        raise InputError(
            f"expected a mapping at the top level, found {type(value).__name__}", file=path, line=doc.line(())
        )
    plain = to_plain(value)
    if defaults:
        for key, default in defaults.items():
            plain.setdefault(key, default)
    try:
        return model.model_validate(plain)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = errors[0]
        loc = tuple(first["loc"])
        # Discriminated unions add the tag as a path element; drop it for line lookup.
        lookup = tuple(p for p in loc if isinstance(p, int) or p in _keys_along(value, loc))
        more = f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        raise InputError(
            _describe(first) + more,
            file=path,
            line=doc.line(lookup),
            field=field_path([p for p in loc if isinstance(p, int | str)]) or None,
        ) from None


def _keys_along(doc: Any, loc: Sequence[Any]) -> set[Any]:
    keys: set[Any] = set()
    node = doc
    for part in loc:
        if isinstance(node, Mapping):
            keys.update(node.keys())
            if part in node:
                node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
    return keys


def _describe(error: Mapping[str, Any]) -> str:
    kind = error.get("type", "")
    message = str(error.get("msg", "invalid"))
    if kind == "extra_forbidden":
        return "unknown field (not part of this file's schema; check the spelling)"
    if kind == "missing":
        return "required field is missing"
    if "input" in error and kind not in {"model_type", "dict_type"}:
        shown = repr(error["input"])
        if len(shown) > 80:
            shown = shown[:77] + "..."
        return f"{message} (got {shown})"
    return message
