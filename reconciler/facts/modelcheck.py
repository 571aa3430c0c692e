"""The model check's command and what it prints, read into values (pure: no I/O).

`modelcheck_argv()` is the command (python3 running `MODELCHECK_SCRIPT`), and
`check_input` / `hash_input` the JSON it reads on stdin; the transport carries
both (`Transport.run(host, argv, input=...)`). `parse_model_check` and
`parse_tree_hash` turn the one JSON object it prints into `ModelCheck` and
`TreeHash`; anything malformed raises ValueError naming what is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from reconciler.facts.modelcheck_script import MODELCHECK_MARKER, MODELCHECK_SCRIPT, PARTIAL_DIR, STAMP_NAME

__all__ = [
    "MODELCHECK_MARKER",
    "PARTIAL_DIR",
    "STAMP_NAME",
    "FileState",
    "HashedFile",
    "ModelCheck",
    "TreeHash",
    "check_input",
    "follow_input",
    "hash_input",
    "modelcheck_argv",
    "needed",
    "parse_model_check",
    "parse_tree_hash",
]

State = Literal["ok", "missing", "partial", "mismatch"]
_STATES = ("ok", "missing", "partial", "mismatch")


@dataclass(frozen=True)
class FileState:
    """One manifest file on one host: its state, its size on disk (0 when absent), bytes in rsync's partial dir."""

    state: State
    size: int
    partial_bytes: int
    ident: tuple[int, int] | None = None
    """(inode, ctime_ns) of the file there, None when there is none: what a copy replacing it will change."""


@dataclass(frozen=True)
class ModelCheck:
    """What a host holds of one model's manifest under `root`."""

    root: str
    exists: bool
    free_bytes: int | None
    """statvfs f_bavail * f_frsize of root or its nearest existing ancestor; None when it could not be read."""
    files: Mapping[str, FileState]
    hashed: tuple[str, ...]
    """The files hashed this run (the others were vouched for by the stamp cache, or not hashable)."""
    errors: tuple[str, ...]

    @property
    def complete(self) -> bool:
        """Every listed file is there with the manifest's size and sha256."""
        return all(f.state == "ok" for f in self.files.values())


@dataclass(frozen=True)
class HashedFile:
    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class TreeHash:
    """Every regular file under `root` (partial folders and the stamp file left out), sorted by path."""

    root: str
    exists: bool
    free_bytes: int | None
    files: tuple[HashedFile, ...]
    hashed: tuple[str, ...]
    errors: tuple[str, ...]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


# -I: isolated mode, so a host's PYTHONPATH or a stray file in the login folder cannot change what it imports.
def modelcheck_argv() -> list[str]:
    """The command; its arguments travel as JSON on stdin (`check_input`, `hash_input`)."""
    return ["python3", "-I", "-c", MODELCHECK_SCRIPT, MODELCHECK_MARKER]


def check_input(root: str, files: Iterable[tuple[str, int, str]], *, workers: int = 4,
                partial_dir: str = PARTIAL_DIR) -> str:  # fmt: skip
    """Stdin of a check of (path, size, sha256) files under `root`."""
    listed = [{"path": p, "size": s, "sha256": h} for p, s, h in files]
    return json.dumps({"mode": "check", "root": root, "files": listed, "workers": workers,
                       "partial_dir": partial_dir})  # fmt: skip


def follow_input(
    root: str,
    files: Iterable[tuple[str, int, str]],
    *,
    deadline_s: float,
    before: Mapping[str, FileState] | None = None,
    workers: int = 4,
    poll_s: float = 0.2,
    partial_dir: str = PARTIAL_DIR,
) -> str:
    """Stdin of a check that hashes each file as a copy renames it into place, until all are or `deadline_s`.

    `before`: each file as a check found it before the copy began (the file a copy replaces); a file not in
    it is compared with what the script finds when it starts."""
    known = before or {}
    listed = [{"path": p, "size": s, "sha256": h, "not": list(known[p].ident or ()) if p in known else "now"}
              for p, s, h in files]  # fmt: skip
    return json.dumps({"mode": "follow", "root": root, "files": listed, "workers": workers,
                       "partial_dir": partial_dir, "deadline_s": deadline_s, "poll_s": poll_s})  # fmt: skip


def hash_input(root: str, *, workers: int = 4, partial_dir: str = PARTIAL_DIR) -> str:
    """Stdin of a listing of every file under `root` with its size and sha256."""
    return json.dumps({"mode": "hash", "root": root, "workers": workers, "partial_dir": partial_dir})


def needed(check: ModelCheck) -> list[str]:
    """The files a receiver must be sent (every one not ok), sorted by path."""
    return sorted(path for path, f in check.files.items() if f.state != "ok")


def _object(text: str, mode: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"model check output is not JSON: {exc}: {text[:200]!r}") from None
    if not isinstance(data, dict):
        raise ValueError("model check output is not a JSON object")
    if data.get("mode") != mode:
        raise ValueError(f"model check output is of mode {data.get('mode')!r}, not {mode!r}")
    for key, kind in (("root", str), ("exists", bool), ("errors", list), ("hashed", list)):
        if not isinstance(data.get(key), kind):
            raise ValueError(f"model check output: {key!r} missing or not a {kind.__name__}")
    free = data.get("free_bytes")
    if free is not None and (not isinstance(free, int) or isinstance(free, bool) or free < 0):
        raise ValueError(f"model check output: free_bytes {free!r} is not a byte count")
    return data


def _count(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"model check output: {what} {value!r} is not a byte count")
    return value


def parse_model_check(text: str) -> ModelCheck:
    data = _object(text, "check")
    files = data.get("files")
    if not isinstance(files, dict):
        raise ValueError("model check output: 'files' is not an object")
    states: dict[str, FileState] = {}
    for path, entry in files.items():
        if not isinstance(entry, dict) or entry.get("state") not in _STATES:
            raise ValueError(f"model check output: {path}: bad entry {entry!r}")
        size = _count(entry.get("size"), f"{path} size")
        partial = _count(entry.get("partial_bytes"), f"{path} partial_bytes")
        ident = entry.get("id")
        if ident is not None and not (isinstance(ident, list) and len(ident) == 2 and all(
                isinstance(n, int) and not isinstance(n, bool) for n in ident)):  # fmt: skip
            raise ValueError(f"model check output: {path}: bad id {ident!r}")
        states[path] = FileState(entry["state"], size, partial, (ident[0], ident[1]) if ident else None)
    hashed = tuple(str(p) for p in data["hashed"])
    errors = tuple(str(e) for e in data["errors"])
    return ModelCheck(data["root"], data["exists"], data.get("free_bytes"), states, hashed, errors)


def parse_tree_hash(text: str) -> TreeHash:
    data = _object(text, "hash")
    files = data.get("files")
    if not isinstance(files, list):
        raise ValueError("model check output: 'files' is not a list")
    out = []
    for entry in files:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise ValueError(f"model check output: bad file entry {entry!r}")
        digest = entry.get("sha256")
        if not isinstance(digest, str) or len(digest) != 64:
            raise ValueError(f"model check output: {entry['path']}: bad sha256 {digest!r}")
        out.append(HashedFile(entry["path"], _count(entry.get("size"), f"{entry['path']} size"), digest))
    hashed = tuple(str(p) for p in data["hashed"])
    errors = tuple(str(e) for e in data["errors"])
    listed = tuple(sorted(out, key=lambda f: f.path))
    return TreeHash(data["root"], data["exists"], data.get("free_bytes"), listed, hashed, errors)
