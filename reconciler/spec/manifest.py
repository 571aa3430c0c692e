"""A model's manifest (`state/models/<model>.manifest.json`): every file of the checkpoint, its size and sha256.

Staging makes each rank host hold exactly these files, and a host "has" a model only when every file
matches by size and checksum, so the manifest is the definition of the model's bytes. It is written by
`lanes model manifest` from a folder that holds the checkpoint and kept in git beside the model file, so a
change of checkpoint is a reviewed commit like any other. It also records the safetensors index file
name and the Hugging Face revision the files came from.

The file is JSON (not YAML): it is written by a program, runs to thousands of lines for big
checkpoints, and a reviewer reads its diff one file per line. It is checked strictly: unknown keys,
duplicate keys, a string where a number belongs, a path that could leave the model's folder or name
lanes' own working files are errors naming the file and the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from reconciler.errors import InputError
from reconciler.spec.base import Name, StrictModel
from reconciler.spec.yamlsrc import field_path

MANIFEST_SUFFIX = ".manifest.json"
"""`state/models/<model>.manifest.json`, beside `state/models/<model>.yaml`."""

PARTIAL_DIR = ".lanes-partial"
"""Where rsync keeps half-copied files (`--partial-dir`, relative: made in each destination file's own
folder, rsync(1) 3.2.7): a folder of that name, at any depth, is never part of a model."""

STAMP_FILE = ".lanes-verified.json"
"""The host-side cache of verified checksums in a model's folder: never part of a model."""

MAX_MANIFEST_BYTES = 4 << 20
"""The state repo's blob limit (`reconciler.source.gitread.MAX_BLOB_BYTES`): about 25,000 files."""

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
REVISION_RE = re.compile(r"^[0-9a-f]{40}$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def manifest_path(state_dir: str, model: str) -> str:
    return f"{state_dir}/models/{model}{MANIFEST_SUFFIX}"


def path_problem(path: str) -> str | None:
    """Why `path` cannot name a file of a model (relative to its folder), or None when it can."""
    if not path:
        return "is empty"
    if _CONTROL_RE.search(path):
        # rsync's --files-from reads one name per line: a newline in a name would be two names.
        return "has a control character (a newline would split it in rsync's --files-from list)"
    if "\\" in path:
        return "has a backslash: write a POSIX path with '/'"
    if path.startswith("/"):
        return "is absolute: write it relative to the model's folder"
    parts = path.split("/")
    if any(part in {"", ".", ".."} for part in parts):
        return "has an empty, '.' or '..' segment: write the plain relative path"
    if PARTIAL_DIR in parts[:-1]:
        return f"is under a {PARTIAL_DIR}/ folder, where half-copied files are kept"
    if path == STAMP_FILE:
        return f"is {STAMP_FILE}, the hosts' cache of verified checksums"
    return None


class ManifestFile(StrictModel):
    """One file of a model, relative to the model's folder."""

    path: str = Field(description="relative POSIX path inside the model's folder")
    size: int = Field(ge=0, description="bytes")
    sha256: str = Field(description="hex sha256 of the file's bytes")

    @field_validator("path")
    @classmethod
    def _plain_relative(cls, value: str) -> str:
        problem = path_problem(value)
        if problem is not None:
            raise ValueError(f"{value!r} {problem}")
        return value

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        if not SHA256_RE.match(value):
            raise ValueError(f"{value!r} is not 64 lower-case hex digits")
        return value


class Manifest(StrictModel):
    """Every file of a model, sorted by path, with the total."""

    model: Name = Field(description="the model file this manifest belongs to")
    revision: str | None = Field(description="the Hugging Face commit sha the files came from, when known")
    index: str | None = Field(description="the safetensors index file (model.safetensors.index.json), if any")
    files: tuple[ManifestFile, ...] = Field(min_length=1)
    total_bytes: int = Field(ge=0, description="the sum of every file's size")

    @field_validator("revision")
    @classmethod
    def _sha(cls, value: str | None) -> str | None:
        if value is not None and not REVISION_RE.match(value):
            raise ValueError(f"{value!r} is not a 40-hex commit sha; a branch is not a pin")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        # Each message starts with the field it is about ("files[3].path: ..."): parse_manifest names it.
        paths = [f.path for f in self.files]
        at: dict[str, int] = {}
        for index, path in enumerate(paths):
            if path in at:
                raise ValueError(f"files[{index}].path: {path!r} is listed twice (also files[{at[path]}])")
            at[path] = index
            if index and paths[index - 1] > path:
                raise ValueError(f"files[{index}].path: {path!r} is out of order; files are sorted by path")
        # A file and a folder of the same name cannot both exist: 'a' and 'a/b' in one manifest is a mistake.
        for index, path in enumerate(paths):
            parts = path.split("/")
            for cut in range(1, len(parts)):
                folder = "/".join(parts[:cut])
                if folder in at:
                    raise ValueError(f"files[{index}].path: {path!r} lies under {folder!r}, which is listed as a file")
        total = sum(f.size for f in self.files)
        if total != self.total_bytes:
            raise ValueError(f"total_bytes: is {self.total_bytes} but the files' sizes add up to {total}")
        if self.index is not None and self.index not in at:
            raise ValueError(f"index: {self.index!r} is not one of the files")
        return self

    def by_path(self) -> dict[str, ManifestFile]:
        return {f.path: f for f in self.files}

    def safetensors_bytes(self) -> int:
        """Bytes of the `.safetensors` shards (each is an 8-byte length, a JSON header, then the tensors)."""
        return sum(f.size for f in self.files if f.path.endswith(".safetensors"))

    def largest(self) -> int:
        return max(f.size for f in self.files)


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


def parse_manifest(path: str, data: bytes) -> Manifest:
    """The manifest in `data` (the blob at `path`), or an InputError naming the file and field."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise InputError(f"file is {len(data)} bytes; a manifest is limited to {MAX_MANIFEST_BYTES}", file=path)
    try:
        text = data.decode("utf-8")
        json.loads(text, object_pairs_hook=_refuse_duplicate_keys)
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", file=path) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg}", file=path, line=exc.lineno) from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"invalid JSON: {exc}", file=path) from None
    try:
        # Strict: a size written as "123" or 1.0, or a path as a number, is an error, not a conversion.
        return Manifest.model_validate_json(text, strict=True)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = errors[0]
        field = field_path([p for p in first["loc"] if isinstance(p, int | str)]) or None
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        if first.get("type") == "extra_forbidden":
            message = "unknown field (not part of a manifest; check the spelling)"
        elif first.get("type") == "missing":
            message = "required field is missing"
        elif field is None and (named := _FIELD_FIRST.match(message)):
            field, message = named["field"], named["rest"]
        raise InputError(message + more, file=path, field=field) from None


_FIELD_FIRST = re.compile(r"^(?P<field>files\[\d+\]\.path|total_bytes|index): (?P<rest>.*)$", re.DOTALL)


def render_manifest(manifest: Manifest) -> str:
    """The manifest as `lanes model manifest` writes it: fixed key order, one file per line (short diffs)."""

    def one(value: object) -> str:
        return json.dumps(value, ensure_ascii=False)

    rows = ",\n".join(
        f'    {{"path": {one(f.path)}, "size": {f.size}, "sha256": {one(f.sha256)}}}' for f in manifest.files
    )
    return (
        "{\n"
        f'  "model": {one(manifest.model)},\n'
        f'  "revision": {one(manifest.revision)},\n'
        f'  "index": {one(manifest.index)},\n'
        f'  "files": [\n{rows}\n  ],\n'
        f'  "total_bytes": {manifest.total_bytes}\n'
        "}\n"
    )


def manifest_of(model: str, revision: str | None, index: str | None, files: Mapping[str, tuple[int, str]]) -> Manifest:
    """A manifest from path -> (size, sha256), sorted and totalled (raises ValidationError on a bad path)."""
    entries = tuple(ManifestFile(path=p, size=s, sha256=h) for p, (s, h) in sorted(files.items()))
    return Manifest(
        model=model, revision=revision, index=index, files=entries, total_bytes=sum(f.size for f in entries)
    )
