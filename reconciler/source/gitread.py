"""Read the files of one commit straight from git objects.

What lanes checks and applies must be exactly what was pushed, so the state
is read from the blobs of a commit (default HEAD), never from a working tree
that may hold uncommitted edits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pygit2

from reconciler.errors import InputError

MAX_BLOB_BYTES = 4 << 20


@dataclass(frozen=True)
class CommitFiles:
    """The files under the requested folders of one commit."""

    commit: str
    files: dict[str, bytes]
    author: str
    time: int
    message: str


def open_repo(path: str | Path) -> pygit2.Repository:
    found = pygit2.discover_repository(str(path))
    if found is None:
        raise InputError(f"not a git repository (or any parent): {path}", file=str(path))
    return pygit2.Repository(found)


def resolve(repo: pygit2.Repository, rev: str) -> pygit2.Commit:
    try:
        obj = repo.revparse_single(rev)
        commit = obj.peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError) as exc:
        raise InputError(f"cannot resolve revision '{rev}': {exc}", field="--rev") from None
    assert isinstance(commit, pygit2.Commit)
    return commit


def _walk(repo: pygit2.Repository, tree: pygit2.Tree, prefix: str, out: dict[str, bytes]) -> None:
    for entry in tree:
        name = entry.name or ""
        path = f"{prefix}/{name}" if prefix else name
        if entry.filemode == pygit2.GIT_FILEMODE_LINK:
            raise InputError("symbolic links are not allowed in a state repo; commit the file itself", file=path)
        if entry.filemode == pygit2.GIT_FILEMODE_COMMIT:
            raise InputError("submodules are not allowed in a state repo", file=path)
        obj = repo[entry.id]
        if isinstance(obj, pygit2.Tree):
            _walk(repo, obj, path, out)
        elif isinstance(obj, pygit2.Blob):
            if obj.size > MAX_BLOB_BYTES:
                raise InputError(f"file is {obj.size} bytes; state files are limited to {MAX_BLOB_BYTES}", file=path)
            out[path] = obj.data


def read_commit(repo: pygit2.Repository, rev: str, folders: tuple[str, ...] = ("state", "policies")) -> CommitFiles:
    """Every blob under `folders` of the commit `rev` resolves to."""
    commit = resolve(repo, rev)
    files: dict[str, bytes] = {}
    for folder in folders:
        node: pygit2.Object = commit.tree
        for part in folder.strip("/").split("/"):
            if not isinstance(node, pygit2.Tree) or part not in node:
                node = None  # type: ignore[assignment]
                break
            node = repo[node[part].id]
        if isinstance(node, pygit2.Tree):
            _walk(repo, node, folder.strip("/"), files)
    return CommitFiles(
        commit=str(commit.id),
        files=files,
        author=f"{commit.author.name} <{commit.author.email}>",
        time=commit.commit_time,
        message=commit.message,
    )
