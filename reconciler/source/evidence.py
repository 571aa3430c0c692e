"""Commit evidence files onto the watched branch and push them, racing pushes politely.

Evidence is data about a commit, added by the daemon with its own identity
on top of whatever the branch head is; a push that loses a race is fetched,
rebuilt on the new head (evidence files never conflict with state files) and
pushed again. A state repo that is a local work tree is committed to in
place with `git commit --only`, which leaves a person's other edits alone.

With signed commits required, evidence commits are signed with the daemon's
own SSH key (`signing_key`), which the allowed signers list under the
`lanes-evidence` principal: the daemon accepts such a commit only when it adds
nothing but `evidence/` on top of a commit it accepts itself. Evidence stays on
the watched branch (rather than a side branch) because that is where `lanes
history`, the baselines of later benchmarks and every clone read it; the
evidence key cannot change a lane, so the branch head it makes is one the
daemon keeps reconciling. `parents` then names the only commits evidence may
be built on (the verified, decided head and the evidence commits made on it):
a branch that moved to anything else gets no evidence signed on top of it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Collection, Mapping
from pathlib import Path

import pygit2

from reconciler.errors import TransientError
from reconciler.source.mirror import Mirror, PushRejectedError
from reconciler.source.signatures import ssh_sign

TMP_REF = "refs/lanes/evidence"
ATTEMPTS = 4


def commit_evidence(
    mirror: Mirror,
    files: Mapping[str, bytes],
    message: str,
    *,
    branch: str,
    local_worktree: Path | None = None,
    author: tuple[str, str] = ("lanes", "lanes@localhost"),
    signing_key: Path | None = None,
    parents: Collection[str] | None = None,
) -> str:
    """Commit `files` (repo path -> bytes) on `branch` and publish it; returns the new commit.

    `signing_key`: sign the commit with this SSH key. `parents`: the commits it may be built on
    (TransientError when the branch head is another).
    """
    if local_worktree is not None:
        return _commit_in_worktree(local_worktree, files, message, author, signing_key, parents)
    with mirror.lock:  # a fetch or a notes push in another thread must not move refs under us
        return _commit_in_mirror(mirror, files, message, branch, author, signing_key, parents)


def _check_parent(head: str, parents: Collection[str] | None) -> None:
    if parents is not None and head not in parents:
        raise TransientError(f"the branch moved to {head[:12]}, not a verified commit: no evidence signed on it")


def _commit_in_mirror(
    mirror: Mirror,
    files: Mapping[str, bytes],
    message: str,
    branch: str,
    author: tuple[str, str],
    signing_key: Path | None = None,
    parents: Collection[str] | None = None,
) -> str:
    repo = mirror.repo
    sig = pygit2.Signature(*author)
    last: Exception | None = None
    for _ in range(ATTEMPTS):
        if branch == mirror.branch:
            head = mirror.fetch()
        else:
            # A proposal branch the daemon itself made in this repository: build on its local head.
            ref = repo.references.get(f"refs/heads/{branch}")
            if ref is None:
                raise TransientError(f"branch {branch} is not in {mirror.path}")
            head = str(ref.target)
        if branch == mirror.branch:
            _check_parent(head, parents)
        index = pygit2.Index()
        index.read_tree(repo[head].peel(pygit2.Tree))
        for path, data in files.items():
            index.add(pygit2.IndexEntry(path, repo.create_blob(data), pygit2.enums.FileMode.BLOB))
        tree = index.write_tree(repo)
        if signing_key is None:
            oid = repo.create_commit(None, sig, sig, message, tree, [pygit2.Oid(hex=head)])
        else:
            # The stub says Oid; libgit2 returns the commit object's text, which is what gets signed.
            content = str(repo.create_commit_string(sig, sig, message, tree, [pygit2.Oid(hex=head)]))
            signature = ssh_sign(signing_key, content.encode()).decode()
            oid = repo.create_commit_with_signature(content, signature)
        repo.references.create(TMP_REF, oid, force=True)
        try:
            mirror.push_ref(TMP_REF, f"refs/heads/{branch}")
        except PushRejectedError as exc:
            last = exc  # someone pushed meanwhile: fetch and rebuild on their head
            continue
        if branch != mirror.branch:
            repo.references.create(f"refs/heads/{branch}", oid, force=True)
        return str(oid)
    raise TransientError(f"evidence push still refused after {ATTEMPTS} attempts: {last}")


def _commit_in_worktree(
    worktree: Path,
    files: Mapping[str, bytes],
    message: str,
    author: tuple[str, str],
    signing_key: Path | None = None,
    parents: Collection[str] | None = None,
) -> str:
    if parents is not None:
        _check_parent(_git_head(worktree), parents)
    for path, data in files.items():
        target = worktree / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    paths = sorted(files)
    identity = ["-c", f"user.name={author[0]}", "-c", f"user.email={author[1]}"]
    sign = ["-S"] if signing_key is not None else ["--no-gpg-sign"]
    if signing_key is not None:
        identity += ["-c", "gpg.format=ssh", "-c", f"user.signingKey={signing_key}"]
    for argv in (["add", "--", *paths], [*identity, "commit", *sign, "--only", "-q", "-m", message, "--", *paths]):
        result = subprocess.run(
            ["git", "-C", str(worktree), *argv],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        if result.returncode != 0:
            raise TransientError(f"{worktree}: git {argv[0]} failed: {result.stderr.strip()[-400:]}")
    return _git_head(worktree)


def _git_head(worktree: Path) -> str:
    out = subprocess.run(
        ["git", "-C", str(worktree), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30, check=True
    )
    return out.stdout.strip()
