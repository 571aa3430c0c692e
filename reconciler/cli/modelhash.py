"""A checkpoint folder on the control node, read for `lanes model manifest`: its files, their sha256, its revision.

Which files make the model: every regular file under the folder, by its path relative to it, with
symlinks to files followed (a Hugging Face cache snapshot is a folder of links into `../../blobs`; the
model is what they point to). Left out, and said so: lanes' own working files (`.lanes-partial/`,
`.lanes-verified.json`), `.git/` (a `git clone` of the repo keeps every LFS object a second time
there) and `.cache/huggingface/` (the download metadata `hf download --local-dir` writes,
huggingface_hub @ 02c8d0ac, src/huggingface_hub/_local_folder.py). A symlink to a folder is refused rather
than followed: it can loop, and copying it would copy another folder's files under this model's name.

Hashing runs in threads: hashlib releases the GIL while it digests a buffer of 2,048 bytes or more
(CPython 3.11 Modules/hashlib.h, HASHLIB_GIL_MINSIZE), so threads use as many cores as the disk feeds.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from reconciler.cli.schema import hf_snapshot
from reconciler.errors import InputError
from reconciler.spec.manifest import PARTIAL_DIR, STAMP_FILE, path_problem

CHUNK = 8 << 20
"""Bytes read per call: large enough that the digest (not the Python loop) is the cost."""

LEFT_OUT_DIRS = (PARTIAL_DIR, ".git", ".cache/huggingface")
LEFT_OUT_FILES = (STAMP_FILE,)
INDEX_NAME = "model.safetensors.index.json"
"""transformers' SAFE_WEIGHTS_INDEX_NAME (src/transformers/utils/__init__.py)."""


@dataclass
class Folder:
    """The files of a checkpoint folder: relative path -> (the path to read, its size)."""

    root: Path
    files: dict[str, tuple[Path, int]] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(size for _, size in self.files.values())


def left_out(rel: str) -> bool:
    """Whether a file or folder at `rel` is left out of a manifest (see the module's docstring)."""
    return rel in LEFT_OUT_FILES or any(rel == d or rel.startswith(d + "/") for d in LEFT_OUT_DIRS)


def resolve_repo_folder(root: Path) -> Path:
    """A Hugging Face cache repo folder (models--ORG--NAME, with refs/ and snapshots/) means the snapshot
    its `refs/main` names (refs/<branch> holds a commit sha, snapshots/<sha> its files:
    https://huggingface.co/docs/hub/local-cache)."""
    ref = root / "refs" / "main"
    if ref.is_file() and (root / "snapshots").is_dir():
        sha = ref.read_text(encoding="utf-8").strip()
        snapshot = root / "snapshots" / sha
        if not snapshot.is_dir():
            raise InputError(f"refs/main names snapshot {sha}, which is not in snapshots/", file=str(ref))
        return snapshot
    return root


def scan_folder(root: Path) -> Folder:
    if not root.is_dir():
        raise InputError("not a folder on this machine", file=str(root))
    folder = Folder(root)
    for here, dirs, names in os.walk(root, followlinks=False):
        base = Path(here)
        rel_base = base.relative_to(root).as_posix()
        rel_base = "" if rel_base == "." else rel_base + "/"
        for name in sorted(dirs):
            rel = rel_base + name
            if left_out(rel):
                folder.left_out.append(rel + "/")
                dirs.remove(name)
            elif (base / name).is_symlink():
                raise InputError(
                    "a symlink to a folder: not followed (it could loop or pull in another folder); "
                    "copy the folder in, or point --from at the real one",
                    file=str(base / name),
                )
        for name in names:
            rel = rel_base + name
            path = base / name
            if left_out(rel):
                folder.left_out.append(rel)
                continue
            try:
                info = path.stat()  # follows a file symlink: the content is the model's
            except OSError as exc:
                raise InputError(f"cannot read: {exc.strerror} (a dangling symlink?)", file=str(path)) from None
            if not stat.S_ISREG(info.st_mode):
                raise InputError("not a regular file (a device, socket or pipe)", file=str(path))
            problem = path_problem(rel)
            if problem is not None:
                raise InputError(f"this file's name {problem}", file=str(path))
            folder.files[rel] = (path, info.st_size)
    if not folder.files:
        raise InputError("the folder holds no files", file=str(root))
    return folder


def sha256_file(path: Path, expected_size: int, on_bytes: Callable[[int], None]) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb", buffering=0) as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
            on_bytes(len(chunk))
    if size != expected_size:
        raise InputError(f"changed while it was read ({expected_size} bytes, then {size}): try again", file=str(path))
    return size, digest.hexdigest()


def hash_folder(folder: Folder, workers: int, on_bytes: Callable[[int], None]) -> dict[str, tuple[int, str]]:
    """path -> (size, sha256) of every file, `workers` files at a time, biggest first (the last to end
    is then a small file, not a 5 GB shard started at the end)."""
    order = sorted(folder.files, key=lambda rel: -folder.files[rel][1])
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="sha256") as pool:
        results = pool.map(lambda rel: (rel, sha256_file(*folder.files[rel], on_bytes)), order)
        return dict(results)


# -- what the folder says about itself ------------------------------------------------------------


def layout_revision(asked: Path, read: Path) -> tuple[str | None, str]:
    """The commit sha the folder's layout records, and where it was read.

    A cache snapshot's folder name is its commit (https://huggingface.co/docs/hub/local-cache). A folder filled
    by `hf download --local-dir` keeps `.cache/huggingface/download/<file>.metadata`, whose first line
    is the commit the file came from (huggingface_hub _local_folder.py); it counts when all agree.
    """
    snapshot = hf_snapshot(read)
    if snapshot is not None:
        how = "its refs/main" if read != asked else "the snapshot folder's name"
        return snapshot[1], how
    meta = read / ".cache" / "huggingface" / "download"
    commits: set[str] = set()
    if meta.is_dir():
        for path in meta.rglob("*.metadata"):
            try:
                first = path.read_text(encoding="utf-8").splitlines()[:1]
            except (OSError, UnicodeDecodeError):
                continue
            commits.update(line.strip() for line in first if line.strip())
    if len(commits) == 1:
        return commits.pop(), "the hf download metadata in .cache/huggingface/download"
    return None, ""


def find_index(paths: Iterable[str]) -> str | None:
    """The safetensors index at the top of the folder: transformers' name, else the only `*.safetensors.index.json`."""
    top = [p for p in paths if "/" not in p and p.endswith(".safetensors.index.json")]
    if INDEX_NAME in top:
        return INDEX_NAME
    return top[0] if len(top) == 1 else None


@dataclass(frozen=True)
class IndexSummary:
    shards: tuple[str, ...]
    total_size: int | None
    """metadata.total_size: the bytes of the tensors (what a model file's weight_bytes records)."""


def read_index(folder: Folder, index: str) -> IndexSummary:
    """The shards the index maps tensors to; every one must be a file of the folder."""
    path = folder.files[index][0]
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the safetensors index: {exc}", file=str(path)) from None
    return index_summary(text, index, folder.files, str(path))


def index_summary(text: str, index: str, files: Collection[str], where: str) -> IndexSummary:
    """The index's shards (each must be one of `files`) and its total_size; `where` names it in errors."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"cannot read the safetensors index: {exc}", file=where) from None
    weight_map = data.get("weight_map") if isinstance(data, Mapping) else None
    if not isinstance(weight_map, Mapping) or not all(isinstance(v, str) for v in weight_map.values()):
        raise InputError("the safetensors index has no weight_map of tensor -> file", file=where)
    base = index.rpartition("/")[0]
    shards = tuple(sorted({f"{base}/{v}" if base else v for v in weight_map.values()}))
    missing = [s for s in shards if s not in files]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise InputError(
            f"the safetensors index maps tensors to files the folder lacks: {shown} (an unfinished download?)",
            file=where,
            field="weight_map",
        )
    metadata = data.get("metadata")
    total = metadata.get("total_size") if isinstance(metadata, Mapping) else None
    return IndexSummary(shards, int(total) if isinstance(total, int | float) and not isinstance(total, bool) else None)
