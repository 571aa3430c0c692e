"""Real git repositories for tests: commit a set of files with pygit2."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pygit2

from tests.example import repo_files

SIGNATURE = pygit2.Signature("Test Person", "test@example.org")


def commit_files(repo: pygit2.Repository, files: Mapping[str, bytes], message: str = "state") -> str:
    """Commit exactly `files` (path -> bytes) on HEAD, replacing the whole tree."""
    index = pygit2.Index()
    for path, data in sorted(files.items()):
        blob = repo.create_blob(data)
        index.add(pygit2.IndexEntry(path, blob, pygit2.enums.FileMode.BLOB))
    tree = index.write_tree(repo)
    parents = [] if repo.head_is_unborn else [repo.head.target]
    oid = repo.create_commit("HEAD", SIGNATURE, SIGNATURE, message, tree, parents)
    return str(oid)


def make_repo(path: Path, files: Mapping[str, bytes] | None = None) -> pygit2.Repository:
    repo = pygit2.init_repository(str(path), bare=False)
    commit_files(repo, files if files is not None else repo_files())
    return repo
