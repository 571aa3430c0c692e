"""Change a lane file's image and engine_version and nothing else (ruamel.yaml round trip).

A proposal is reviewed as a diff: it must show the two lines that change and
not a reformatted file, or the reviewer cannot see what the bot did. The
file is loaded and dumped in round-trip mode (comments, key order, flow
lists, quotes kept) with the indentation the file itself uses, found by
checking which setting reproduces the untouched file byte for byte. The
result is then checked: any difference outside the two lines is an error,
never a commit.
"""

from __future__ import annotations

import io
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, SingleQuotedScalarString

from reconciler.errors import InputError, PermanentError
from reconciler.spec.yamlsrc import parse_yaml

EDITED_KEYS = ("image", "engine_version")
_INDENTS = ((2, 4, 2), (2, 2, 0), (4, 6, 4), (4, 4, 0), (4, 4, 2), (2, 4, 0), (3, 5, 3))


def _yaml(mapping: int, sequence: int, offset: int) -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    yaml.width = 1 << 16  # never fold a long image reference onto two lines
    return yaml


def _dump(yaml: YAML, doc: Any) -> str:
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


def _round_tripper(text: str, path: str) -> YAML:
    """The ruamel set-up that reproduces this file unchanged, or an error saying none does."""
    for mapping, sequence, offset in _INDENTS:
        yaml = _yaml(mapping, sequence, offset)
        try:
            if _dump(yaml, yaml.load(text)) == text:
                return yaml
        except YAMLError as exc:
            raise PermanentError(f"{path}: not valid YAML: {exc}") from None
    raise PermanentError(f"{path}: cannot be edited without reformatting it (unusual indentation or layout)")


def _same_style(old: Any, new: str) -> Any:
    """A new value quoted as the old one was (ruamel keeps the quote style on its string subclasses)."""
    if isinstance(old, DoubleQuotedScalarString):
        return DoubleQuotedScalarString(new)
    if isinstance(old, SingleQuotedScalarString):
        return SingleQuotedScalarString(new)
    return new


def bump_lane(text: str, *, image: str, engine_version: str, path: str) -> str:
    """The lane file with `image:` and `engine_version:` set; every other byte as it was."""
    try:
        parse_yaml(path, text.encode())  # the state loader's size, alias and depth caps before ruamel's round trip
    except InputError as exc:
        raise PermanentError(str(exc)) from None
    yaml = _round_tripper(text, path)
    doc = yaml.load(text)
    if not isinstance(doc, CommentedMap) or any(key not in doc for key in EDITED_KEYS):
        raise PermanentError(f"{path}: a lane file needs top-level image and engine_version keys to be bumped")
    lines = {doc.lc.key(key)[0] for key in EDITED_KEYS}
    doc["image"] = _same_style(doc["image"], image)
    doc["engine_version"] = _same_style(doc["engine_version"], engine_version)
    edited = _dump(yaml, doc)
    before, after = text.splitlines(), edited.splitlines()
    changed = {i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b}
    if len(before) != len(after) or not changed <= lines:
        raise PermanentError(f"{path}: the edit would change more than the image and engine_version lines")
    check = yaml.load(edited)
    if check["image"] != image or check["engine_version"] != engine_version:
        raise PermanentError(f"{path}: the edited values do not read back as written")
    return edited
