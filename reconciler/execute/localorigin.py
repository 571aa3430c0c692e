"""What a commit may name on the control node: an origin folder under a root the daemon's settings allow.

A model file's `origin: {path: ...}` is a folder on the control node that rsync sends from, with the
daemon's own SSH key. Before this check a commit could name any folder, the one holding `ssh.key`
included, and the daemon copied it onto a Spark; hashes were compared only after the bytes had landed.
So a control-node origin is used only when:

- the daemon's settings (`[ssh] origin_roots`, `lanes apply --origin-root`) list roots, and the folder
  is at or under one of them, compared after resolving (never from the state repo: a commit cannot
  widen what it may read);
- no component of the folder's path is a symlink, and a file inside it is one only when what it
  points to is a regular file under the same allowed root (rsync's `--copy-links` sends what a link
  points to, so a link to the daemon's key would send the key; a Hugging Face cache snapshot, whose
  files link into the cache's blobs/, stays usable as an origin);
- neither the credentials folders nor the state and journal folders are inside it, or it inside them;
- every file of the manifest is a regular file of the manifest's size and sha256, checked on the
  control node before the first byte leaves for a Spark (`verify_local_files`).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from reconciler.execute.stagetypes import ManifestLike, StagingError

HASH_CHUNK = 8 << 20


@dataclass(frozen=True)
class LocalOrigins:
    """The daemon's allowlist for control-node origins, and the folders that must never be sent."""

    roots: tuple[Path, ...] = ()
    forbidden: tuple[Path, ...] = ()
    """The credentials, secrets, journal and mirror folders: never inside an origin, nor it inside them."""


def _under(path: Path, prefix: Path) -> bool:
    return path == prefix or prefix in path.parents


def _symlink_in(path: Path) -> Path | None:
    """The first component of `path` that is a symlink; raises OSError when one is absent."""
    parts = path.parts
    for i in range(2, len(parts) + 1):
        here = Path(*parts[:i])
        if stat.S_ISLNK(os.lstat(here).st_mode):
            return here
    return None


def checked_origin(folder: str, origins: LocalOrigins, *, model: str, host: str) -> tuple[Path, Path]:
    """(`folder` resolved, the root it is under) when it may be used as a control-node origin, or
    StagingError (permanent) saying why not."""

    def refuse(why: str) -> StagingError:
        return StagingError(
            f"model {model}: origin {folder} on the control node refused: {why}", host=host, transient=False
        )

    if not origins.roots:
        raise refuse(
            "no origin roots are configured in the daemon's settings ([ssh] origin_roots; "
            "`lanes apply --origin-root`), so no folder of the control node may be sent"
        )
    path = Path(folder)
    if not path.is_absolute() or ".." in path.parts:
        raise refuse("not an absolute path without '..'")
    try:
        link = _symlink_in(path)
    except OSError as exc:
        raise refuse(f"cannot be read ({exc.strerror})") from None
    if link is not None:
        raise refuse(f"{link} is a symlink; origins are plain folders")
    real = Path(os.path.realpath(path))
    roots = [Path(os.path.realpath(r)) for r in origins.roots]
    root = next((r for r in roots if _under(real, r)), None)
    if root is None:
        raise refuse(f"not under an allowed origin root ({', '.join(str(r) for r in origins.roots)})")
    for kept in origins.forbidden:
        kept_real = Path(os.path.realpath(kept))
        if _under(kept_real, real) or _under(real, kept_real):
            raise refuse(f"{kept} (the daemon's credentials or state) may never be part of an origin")
    return real, root


def verify_local_files(
    folder: Path, manifest: ManifestLike, *, model: str, host: str, root: Path | None = None
) -> None:
    """Every manifest file under `folder`: a regular file of the manifest's size and sha256, or a symlink to
    one under `root` (default: `folder`). Runs before any byte leaves the control node; a mismatch is a
    permanent StagingError naming the file."""
    confine = Path(os.path.realpath(root if root is not None else folder))
    for entry in manifest.files:
        path = folder / entry.path
        where = f"model {model}: {entry.path} in the origin {folder} on the control node"

        def refuse(why: str, *, where: str = where, file: str = entry.path) -> StagingError:
            return StagingError(f"{where}: {why}; nothing is sent", host=host, file=file, transient=False)

        real = Path(os.path.realpath(path))
        if not _under(real, confine):
            raise refuse(f"resolves to {real}, outside {confine}")
        try:
            info = os.lstat(real)
        except OSError as exc:
            raise refuse(f"cannot be read ({exc.strerror})") from None
        if not stat.S_ISREG(info.st_mode):
            raise refuse("not a regular file")
        if info.st_size != entry.size:
            raise refuse(f"{info.st_size} bytes, the manifest says {entry.size}")
        digest = hashlib.sha256()
        try:
            # O_NOFOLLOW: the resolved file cannot have become a symlink since it was resolved.
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as exc:
            raise refuse(f"cannot be read ({exc.strerror})") from None
        with os.fdopen(fd, "rb") as handle:
            while chunk := handle.read(HASH_CHUNK):
                digest.update(chunk)
        if digest.hexdigest() != entry.sha256:
            raise refuse("sha256 differs from the manifest's")


def forbidden_dirs(files: Sequence[Path | None], folders: Sequence[Path | None] = ()) -> tuple[Path, ...]:
    """The folders of the daemon's secrets and state: those holding `files`, and `folders` themselves."""
    out: list[Path] = []
    for folder in [*(f.parent for f in files if f is not None), *(f for f in folders if f is not None)]:
        if folder not in out:
            out.append(folder)
    return tuple(out)
