"""An upstream's git repository as `lanes upstream` polls it: commits whose subjects it records."""

from __future__ import annotations

import pygit2

AUTHOR = pygit2.Signature("FLARE dev", "dev@example.org", 1_792_000_000, 0)


def commit(repo: pygit2.Repository, subject: str, when: int, branch: str = "main") -> str:
    ref = f"refs/heads/{branch}"
    parents = [repo.references[ref].target] if ref in repo.references else []
    blob = repo.create_blob(subject.encode())
    builder = repo.TreeBuilder()
    builder.insert("CHANGES", blob, pygit2.enums.FileMode.BLOB)
    sig = pygit2.Signature(AUTHOR.name, AUTHOR.email, when, 0)
    return str(repo.create_commit(ref, sig, sig, f"{subject}\n\nbody of {subject}\n", builder.write(), parents))
