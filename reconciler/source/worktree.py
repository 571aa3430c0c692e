"""Uncommitted changes under the state and policy folders, and a commit object of the working tree to check.

`lanes check` reads a commit, as the daemon does: a lane file edited but not committed is not what it checks,
and saying "ok" about HEAD while the file on screen says otherwise misleads. So check names what is
uncommitted, and `--worktree` checks the files as they are: their blobs, a tree and a commit object are
written to the repository's object store (unreferenced: no branch, ref or index changes; `git gc` prunes
them), and that commit is loaded like any other.
"""

from __future__ import annotations

import pygit2

_SIGNATURE = pygit2.Signature("lanes check", "lanes@localhost")
_IGNORED = pygit2.enums.FileStatus.IGNORED
_DELETED = pygit2.enums.FileStatus.WT_DELETED | pygit2.enums.FileStatus.INDEX_DELETED


def _status_word(flags: int) -> str:
    if flags & _DELETED:
        return "deleted"
    if flags & (pygit2.enums.FileStatus.WT_NEW | pygit2.enums.FileStatus.INDEX_NEW):
        return "new"
    return "modified"


def uncommitted(repo: pygit2.Repository, folders: tuple[str, ...]) -> list[tuple[str, str]]:
    """(path, 'modified' | 'new' | 'deleted') of every path under `folders` that differs from HEAD."""
    if repo.is_bare or repo.workdir is None:
        return []
    prefixes = tuple(f"{f.strip('/')}/" for f in folders)
    return sorted(
        (path, _status_word(flags))
        for path, flags in repo.status().items()
        if not flags & _IGNORED and path.startswith(prefixes)
    )


def worktree_commit(repo: pygit2.Repository, folders: tuple[str, ...]) -> str:
    """A commit object of HEAD with the working tree's files under `folders` in place of HEAD's (its id)."""
    head = repo.revparse_single("HEAD").peel(pygit2.Commit)
    index = pygit2.Index()
    index.read_tree(head.tree)
    for path, word in uncommitted(repo, folders):
        if word == "deleted":
            index.remove(path)
        else:
            blob = repo.create_blob_fromworkdir(path)
            index.add(pygit2.IndexEntry(path, blob, pygit2.enums.FileMode.BLOB))
    tree = index.write_tree(repo)
    return str(repo.create_commit(None, _SIGNATURE, _SIGNATURE, "lanes check --worktree", tree, [head.id]))
