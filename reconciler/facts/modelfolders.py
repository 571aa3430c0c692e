"""The folders beside a host's model paths, listed with their size, and the removal of one of them.

Checkpoints are big (a 252 GB model is a sixteenth of a Spark's 4 TB disk) and they outlive the lanes
that used them. `lanes model unused` asks each host, in one command, for the folders beside its model
paths (`/models/*` when models live in `/models/NAME`) that nothing the state references on that host,
with their size; `lanes model remove` removes one that a person named. The host checks again, in the same
command that removes: the folder must sit directly in one of the listed parents, be a real folder (not a
symlink, so nothing outside is reached) and not be one the state references there. The removal uses
shutil.rmtree, which on Linux works through file descriptors and never follows a symlink inside the
tree (Python docs, shutil.rmtree.avoids_symlink_attacks).

Arguments travel as one JSON object on stdin, like the model check's (`reconciler.facts.modelcheck`):

    {"mode": "list", "parents": ["/models"], "keep": ["/models/A"]}
    {"mode": "remove", "path": "/models/B", "parents": ["/models"], "keep": ["/models/A"]}

Output, one JSON object: list -> {"mode", "folders": [{"path", "bytes"}], "absent": [parents not there],
"errors": [...]}; remove -> {"mode", "path", "removed": bool, "bytes", "errors"}, exit 3 when refused.
Sizes count regular files once per inode, without following symlinks (an HF snapshot's links are not the
snapshot's bytes: its blobs are). Hidden folders and `lost+found` are never listed: they are not models.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MODELFOLDERS_MARKER = "lanes-modelfolders"
REFUSED_EXIT = 3

MODELFOLDERS_SCRIPT = r"""
import json, os, shutil, stat, sys


def tree_bytes(top, errors):
    total, seen = 0, set()
    def onerror(e):
        errors.append("%s: %s" % (e.filename, e.strerror))
    for here, dirs, names in os.walk(top, onerror=onerror):
        for name in names:
            try:
                st = os.lstat(os.path.join(here, name))
            except OSError as e:
                errors.append("%s: %s" % (os.path.join(here, name), e.strerror))
                continue
            if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def candidates(parent):
    out = []
    for name in sorted(os.listdir(parent)):
        if name.startswith(".") or name == "lost+found":
            continue
        path = os.path.join(parent, name)
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            out.append(path)
    return out


def main():
    try:
        args = json.loads(sys.stdin.read())
        mode = args["mode"]
        parents = [os.path.normpath(p) for p in args["parents"]]
        keep = set(os.path.normpath(p) for p in args["keep"])
        if mode not in ("list", "remove") or not all(p.startswith("/") for p in parents):
            raise ValueError("mode must be list or remove, parents absolute")
    except (ValueError, KeyError, TypeError) as e:
        sys.stderr.write("lanes-modelfolders: bad arguments: %s\n" % e)
        sys.exit(2)
    errors = []
    if mode == "list":
        folders, absent = [], []
        for parent in parents:
            try:
                paths = candidates(parent)
            except FileNotFoundError:
                absent.append(parent)
                continue
            except OSError as e:
                errors.append("%s: %s" % (parent, e.strerror))
                continue
            for path in paths:
                if path not in keep:
                    folders.append({"path": path, "bytes": tree_bytes(path, errors)})
        out = {"mode": mode, "folders": folders, "absent": absent, "errors": errors}
        sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")
        return
    path = args.get("path")
    if not isinstance(path, str) or os.path.normpath(path) != path:
        sys.stderr.write("lanes-modelfolders: refused: %r is not a plain absolute path\n" % (path,))
        sys.exit(3)
    if os.path.dirname(path) not in parents or path in keep:
        sys.stderr.write("lanes-modelfolders: refused: %s is not an unused folder beside the model paths\n" % path)
        sys.exit(3)
    try:
        listed = candidates(os.path.dirname(path))
    except OSError as e:
        listed = []
    if path not in listed:
        sys.stderr.write("lanes-modelfolders: refused: %s is not a folder (a symlink, a file, or gone)\n" % path)
        sys.exit(3)
    size = tree_bytes(path, errors)
    try:
        shutil.rmtree(path)
        removed = True
    except OSError as e:
        errors.append("%s: %s" % (getattr(e, "filename", path), e.strerror))
        removed = not os.path.lexists(path)
    out = {"mode": mode, "path": path, "removed": removed, "bytes": size, "errors": errors}
    sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")
    if not removed:
        sys.exit(1)


main()
"""


def modelfolders_argv() -> list[str]:
    """The command; its arguments travel as JSON on stdin (`list_input`, `remove_input`)."""
    return ["python3", "-I", "-c", MODELFOLDERS_SCRIPT, MODELFOLDERS_MARKER]


HEAD_MAX = 16 << 20
"""The most `head_argv` reads: a safetensors index is well under a megabyte even for thousands of tensors."""


def head_argv(path: str, limit: int = HEAD_MAX) -> list[str]:
    """Read at most `limit` bytes of a small file on a host, e.g. the safetensors index of an origin's
    checkpoint (GNU coreutils and BusyBox `head` both take -c; `--` ends options before the path)."""
    return ["head", "-c", str(limit), "--", path]


def list_input(parents: Iterable[str], keep: Iterable[str]) -> str:
    return json.dumps({"mode": "list", "parents": sorted(set(parents)), "keep": sorted(set(keep))})


def remove_input(path: str, parents: Iterable[str], keep: Iterable[str]) -> str:
    return json.dumps({"mode": "remove", "path": path, "parents": sorted(set(parents)), "keep": sorted(set(keep))})


@dataclass(frozen=True)
class Folder:
    path: str
    bytes: int


@dataclass(frozen=True)
class FolderListing:
    folders: tuple[Folder, ...]
    absent: tuple[str, ...]
    errors: tuple[str, ...]


@dataclass(frozen=True)
class Removal:
    path: str
    removed: bool
    bytes: int
    errors: tuple[str, ...]


def _object(text: str, mode: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"model folders output is not JSON: {exc}: {text[:200]!r}") from None
    if not isinstance(data, dict) or data.get("mode") != mode:
        raise ValueError(f"model folders output is not a {mode!r} answer: {text[:200]!r}")
    if not isinstance(data.get("errors"), list):
        raise ValueError("model folders output: 'errors' missing or not a list")
    return data


def _count(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"model folders output: {what} {value!r} is not a byte count")
    return value


def parse_listing(text: str) -> FolderListing:
    data = _object(text, "list")
    folders, absent = data.get("folders"), data.get("absent")
    if not isinstance(folders, list) or not isinstance(absent, list):
        raise ValueError("model folders output: 'folders' or 'absent' is not a list")
    out = []
    for entry in folders:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise ValueError(f"model folders output: bad folder {entry!r}")
        out.append(Folder(entry["path"], _count(entry.get("bytes"), entry["path"])))
    return FolderListing(
        tuple(sorted(out, key=lambda f: f.path)), tuple(str(a) for a in absent), tuple(str(e) for e in data["errors"])
    )


def parse_removal(text: str) -> Removal:
    data = _object(text, "remove")
    if not isinstance(data.get("path"), str) or not isinstance(data.get("removed"), bool):
        raise ValueError("model folders output: 'path' or 'removed' missing")
    return Removal(
        data["path"], data["removed"], _count(data.get("bytes"), "bytes"), tuple(str(e) for e in data["errors"])
    )
