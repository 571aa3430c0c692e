"""Real git repositories for tests, written with pygit2.

`commit_files` / `make_repo` commit a set of files on HEAD; a `StateRepo` is a state repository that a
test commits to step by step, on a branch it names (a force-push is a commit with other parents).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pygit2

from tests.support.example import repo_files

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
    if not repo.is_bare:
        # The files on disk too, as after a commit in a clone: `lanes check` names what differs from HEAD.
        repo.checkout_head(strategy=pygit2.enums.CheckoutStrategy.FORCE)  # type: ignore[no-untyped-call]
    return str(oid)


def make_repo(path: Path, files: Mapping[str, bytes] | None = None) -> pygit2.Repository:
    repo = pygit2.init_repository(str(path), bare=False)
    commit_files(repo, files if files is not None else repo_files())
    return repo


class StateRepo:
    """A state repository (bare or not) whose branch `main` a test moves commit by commit."""

    def __init__(self, path: Path, *, bare: bool = False) -> None:
        self.path = path
        self.repo = pygit2.init_repository(str(path), bare=bare, initial_head="main")

    def commit(
        self,
        files: dict[str, bytes],
        message: str = "change lanes",
        *,
        parents: list[str] | None = None,
        ref: str = "refs/heads/main",
    ) -> str:
        """Commit exactly `files` onto `ref` (by default after its head; `parents` rewrites history)."""
        index = pygit2.Index()
        for p, data in sorted(files.items()):
            index.add(pygit2.IndexEntry(p, self.repo.create_blob(data), pygit2.enums.FileMode.BLOB))
        tree = index.write_tree(self.repo)
        if parents is None:
            parents = [] if self.repo.head_is_unborn else [str(self.repo.head.target)]
        oid = self.repo.create_commit(None, SIGNATURE, SIGNATURE, message, tree, parents)
        self.repo.references.create(ref, oid, force=True)
        return str(oid)

    def head(self) -> str:
        return str(self.repo.head.target)

    def reopen(self, path: Path) -> None:
        """Point at the repository after its directory moved (a remote renamed away and back)."""
        self.path = path
        self.repo = pygit2.Repository(str(path))
