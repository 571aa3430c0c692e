"""Model folders on a simulated Spark (or origin): files with sizes and checksums, answered as the real scripts do.

A test puts a model's files on a host (`put`: path -> bytes, or a `SimFile` with a size and sha256 when
the bytes would be too many), leaves half a file in rsync's partial folder (`set_partial`), or adds a
folder beside the models; the host then answers exactly the commands lanes sends about them:

- the model check (`reconciler.facts.modelcheck`): check a manifest's files, or hash every file;
- the model folders listing and removal (`reconciler.facts.modelfolders`);
- `head -c N -- FILE`, which `lanes model manifest HOST:DIR` uses to read a safetensors index.

The argv must be what the builders in `reconciler.facts` make and the JSON on stdin must hold only the
fields they write; anything else is refused with exit 2, as a drift between the two must show. Nothing
touches the machine's files: the folders live in memory, per host.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.facts.modelcheck import MODELCHECK_MARKER, PARTIAL_DIR, STAMP_NAME, modelcheck_argv
from reconciler.facts.modelfolders import MODELFOLDERS_MARKER, REFUSED_EXIT, head_argv, modelfolders_argv
from reconciler.sim.hostfacts import SimHostFacts

Result = tuple[int, str, str]


@dataclass(frozen=True)
class SimFile:
    """One file of a simulated folder: its size and sha256, and its bytes when a test gave them."""

    size: int
    sha256: str
    content: bytes | None = None

    @classmethod
    def of(cls, data: bytes) -> SimFile:
        return cls(len(data), hashlib.sha256(data).hexdigest(), data)


def wants_stdin(argv: list[str]) -> bool:
    return argv in (modelcheck_argv(), modelfolders_argv())


def handles(argv: list[str]) -> bool:
    """Whether the command is one of those this module answers (or a mangled one of them, to refuse)."""
    if argv[:1] == ["head"]:
        return True
    return (
        len(argv) >= 5 and argv[:3] == ["python3", "-I", "-c"] and argv[4] in (MODELCHECK_MARKER, MODELFOLDERS_MARKER)
    )


class SimModelFiles:
    """The model folders of one simulated host."""

    def __init__(self, facts: SimHostFacts) -> None:
        self.facts = facts
        self.trees: dict[str, dict[str, SimFile]] = {}
        """Folder -> relative path -> file."""
        self.partials: dict[tuple[str, str], int] = {}
        """(folder, relative path) -> bytes rsync left in the partial folder."""
        self.links: set[str] = set()
        """Paths that are symlinks to folders: never listed, never removed."""
        self.requests: list[dict[str, Any]] = []
        """Every JSON request answered, in order (tests count the round trips)."""

    # -- what tests set up ---------------------------------------------------------------------

    def put(self, root: str, files: Mapping[str, bytes | SimFile]) -> None:
        """A folder holding these files (replacing what was there); the probe sees its bytes too."""
        tree = {rel: f if isinstance(f, SimFile) else SimFile.of(f) for rel, f in files.items()}
        self.trees[root] = tree
        self.facts.add_model_path(root, sum(f.size for f in tree.values()))

    def set_partial(self, root: str, rel: str, size: int) -> None:
        self.partials[(root, rel)] = size

    # -- the commands --------------------------------------------------------------------------

    def execute(self, argv: list[str], stdin: str) -> Result:
        if argv[:1] == ["head"]:
            return self._head(argv)
        if argv == modelcheck_argv():
            return self._modelcheck(stdin)
        if argv == modelfolders_argv():
            return self._folders(stdin)
        return 2, "", f"{argv[4]}: argv differs from what reconciler.facts builds\n"

    def _args(self, stdin: str, marker: str, allowed: set[str]) -> dict[str, Any] | str:
        try:
            args = json.loads(stdin)
        except ValueError as exc:
            return f"{marker}: bad arguments: {exc}\n"
        if not isinstance(args, dict) or not set(args) <= allowed:
            return f"{marker}: bad arguments: fields {sorted(args) if isinstance(args, dict) else args!r}\n"
        self.requests.append(args)
        return args

    def free_bytes(self, root: str) -> int | None:
        path = root
        while True:
            if path in self.facts.disk_by_path:
                return self.facts.disk_by_path[path][1]
            if path == "/":
                return self.facts.disk[1] if self.facts.disk is not None else None
            path = posixpath.dirname(path)

    def _modelcheck(self, stdin: str) -> Result:
        args = self._args(stdin, MODELCHECK_MARKER, {"mode", "root", "files", "workers", "partial_dir"})
        if isinstance(args, str):
            return 2, "", args
        mode, root = args.get("mode", "check"), args.get("root")
        if mode not in ("check", "hash") or not isinstance(root, str) or args.get("partial_dir") != PARTIAL_DIR:
            return 2, "", f"{MODELCHECK_MARKER}: bad arguments: {args!r}\n"
        root = posixpath.normpath(root)
        tree = self.trees.get(root)
        out: dict[str, Any] = {
            "mode": mode,
            "root": root,
            "exists": tree is not None,
            "free_bytes": self.free_bytes(root),
            "hashed": [],
            "errors": [],
        }
        if mode == "hash":
            files = sorted((tree or {}).items())
            out["files"] = [{"path": rel, "size": f.size, "sha256": f.sha256} for rel, f in files if rel != STAMP_NAME]
            out["hashed"] = [rel for rel, _ in files]
        else:
            out["files"] = {}
            for item in args.get("files", []):
                rel, size, want = item["path"], int(item["size"]), item["sha256"]
                have = (tree or {}).get(rel)
                partial = self.partials.get((root, rel), 0)
                if have is None:
                    state = "partial" if partial else "missing"
                elif have.size < size:
                    state = "partial"
                elif have.size > size:
                    state = "mismatch"
                else:
                    out["hashed"].append(rel)
                    state = "ok" if have.sha256 == want else "mismatch"
                out["files"][rel] = {"state": state, "size": have.size if have else 0, "partial_bytes": partial}
            out["hashed"].sort()
        return 0, json.dumps(out, sort_keys=True) + "\n", ""

    def _head(self, argv: list[str]) -> Result:
        if len(argv) != 5 or argv != head_argv(argv[4], int(argv[2]) if argv[2].isdigit() else -1):
            return 2, "", "head: argv differs from what lanes builds\n"
        folder, rel = self._locate(argv[4])
        found = self.trees.get(folder, {}).get(rel) if folder is not None else None
        if found is None or found.content is None:
            return 1, "", f"head: cannot open '{argv[4]}' for reading: No such file or directory\n"
        return 0, found.content[: int(argv[2])].decode("utf-8", errors="replace"), ""

    def _locate(self, path: str) -> tuple[str | None, str]:
        for root in self.trees:
            if path.startswith(root + "/"):
                return root, path[len(root) + 1 :]
        return None, ""

    def _children(self, parent: str) -> list[str] | None:
        """Folders directly in `parent` (None: `parent` does not exist)."""
        known = [*self.trees, *self.links]
        if not any(p.startswith(parent.rstrip("/") + "/") for p in known):
            return None
        return sorted(
            p for p in self.trees if posixpath.dirname(p) == parent and not posixpath.basename(p).startswith(".")
        )

    def _folders(self, stdin: str) -> Result:
        args = self._args(stdin, MODELFOLDERS_MARKER, {"mode", "parents", "keep", "path"})
        if isinstance(args, str):
            return 2, "", args
        mode, parents, keep = args.get("mode"), args.get("parents"), set(args.get("keep", []))
        if mode not in ("list", "remove") or not isinstance(parents, list):
            return 2, "", f"{MODELFOLDERS_MARKER}: bad arguments: {args!r}\n"
        if mode == "list":
            folders, absent = [], []
            for parent in parents:
                children = self._children(parent)
                if children is None:
                    absent.append(parent)
                    continue
                folders += [
                    {"path": p, "bytes": sum(f.size for f in self.trees[p].values())} for p in children if p not in keep
                ]
            out = {"mode": "list", "folders": folders, "absent": absent, "errors": []}
            return 0, json.dumps(out, sort_keys=True) + "\n", ""
        path = args.get("path")
        if not isinstance(path, str) or posixpath.normpath(path) != path:
            return REFUSED_EXIT, "", f"{MODELFOLDERS_MARKER}: refused: {path!r} is not a plain absolute path\n"
        if posixpath.dirname(path) not in parents or path in keep:
            return REFUSED_EXIT, "", f"{MODELFOLDERS_MARKER}: refused: {path} is not an unused folder\n"
        if path not in (self._children(posixpath.dirname(path)) or []):
            return REFUSED_EXIT, "", f"{MODELFOLDERS_MARKER}: refused: {path} is not a folder\n"
        tree = self.trees.pop(path)
        self.facts.models.pop(path, None)
        done: dict[str, Any] = {
            "mode": "remove",
            "path": path,
            "removed": True,
            "bytes": sum(f.size for f in tree.values()),
            "errors": [],
        }
        return 0, json.dumps(done, sort_keys=True) + "\n", ""
