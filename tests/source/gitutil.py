"""Real git repositories for the source tests: a forge (bare), a working clone, commits and pushes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pygit2

ALICE = pygit2.Signature("Alice Operator", "alice@example.org", 1_790_000_000, 0)


def sig(name: str = "Alice Operator", email: str = "alice@example.org", when: int | None = None) -> pygit2.Signature:
    return pygit2.Signature(name, email, when) if when is not None else pygit2.Signature(name, email)


def commit(
    repo: pygit2.Repository,
    changes: Mapping[str, bytes | None],
    message: str = "change",
    *,
    ref: str = "refs/heads/main",
    parents: list[str] | None = None,
    author: pygit2.Signature | None = None,
) -> str:
    """Commit on `ref`: the parent's tree with `changes` applied (None deletes a path)."""
    index = pygit2.Index()
    current = repo.references.get(ref)
    parent_ids = parents if parents is not None else ([str(current.target)] if current is not None else [])
    if parent_ids:
        parent = repo[parent_ids[0]]
        assert isinstance(parent, pygit2.Commit)
        index.read_tree(parent.tree)
    for path, data in changes.items():
        if data is None:
            index.remove(path)
        else:
            index.add(pygit2.IndexEntry(path, repo.create_blob(data), pygit2.enums.FileMode.BLOB))
    tree = index.write_tree(repo)
    who = author or sig()
    oid = repo.create_commit(None, who, who, message, tree, parent_ids)
    repo.references.create(ref, oid, force=True)
    return str(oid)


def forge_and_clone(tmp: Path, files: Mapping[str, bytes] | None = None) -> tuple[pygit2.Repository, pygit2.Repository]:
    """A bare "forge" repository and a working clone of it with one pushed commit."""
    forge = pygit2.init_repository(str(tmp / "forge.git"), bare=True, initial_head="main")
    work = pygit2.init_repository(str(tmp / "work"), bare=False, initial_head="main")
    work.remotes.create("origin", str(tmp / "forge.git"))
    commit(work, files or {"state/lanes/a.yaml": b"image: one\n"}, "first")
    push(work)
    return forge, work


def push(work: pygit2.Repository, *, force: bool = False, ref: str = "refs/heads/main") -> None:
    work.remotes["origin"].push([("+" if force else "") + f"{ref}:{ref}"])


def git(*args: str, cwd: Path | None = None) -> str:
    """The git command with no user or system config, so the host's settings cannot leak in."""
    env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "Tester",
        "GIT_AUTHOR_EMAIL": "tester@example.org",
        "GIT_COMMITTER_NAME": "Tester",
        "GIT_COMMITTER_EMAIL": "tester@example.org",
    }
    result = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 0, f"git {' '.join(args)}: {result.stderr}"
    return result.stdout
