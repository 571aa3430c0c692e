"""Signatures are judged at the current time, not at the committer date the signer wrote into the commit."""

from __future__ import annotations

import shutil
from pathlib import Path

import pygit2
import pytest

from reconciler.source.signatures import verify_commit
from tests.source.gitutil import commit
from tests.support.signing import ssh_key, ssh_sign

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen is not installed"),
]
JAN_2019 = 1546300800


def dated_signed_commit(repo: pygit2.Repository, key: Path, when: int) -> str:
    """A commit signed by `key` whose author and committer dates say `when` (the signer chooses them)."""
    parent = repo.references["refs/heads/main"].target
    tree = repo[parent].peel(pygit2.Commit).tree_id
    who = pygit2.Signature("Alice Operator", "alice@example.org", when, 0)
    content = str(repo.create_commit_string(who, who, "back-dated change\n", tree, [parent]))
    oid = repo.create_commit_with_signature(content, ssh_sign(key, content))
    repo.references.create("refs/heads/main", oid, force=True)
    return str(oid)


def test_a_key_past_its_valid_before_cannot_sign_by_back_dating_the_commit(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "state.git"), bare=True, initial_head="main")
    commit(repo, {"state/lanes/a.yaml": b"image: one\n"}, "start")
    alice = ssh_key(tmp_path, "alice")
    public = " ".join(Path(f"{alice}.pub").read_text().split()[:2])
    allowed = tmp_path / "allowed_signers"
    # Alice's key was allowed until 2020 (she left); the commit claims to be from 2019.
    allowed.write_text(f'alice@example.org namespaces="git",valid-before="20200101" {public}\n')
    sha = dated_signed_commit(repo, alice, JAN_2019)
    check = verify_commit(repo, sha, mode="ssh", allowed_signers=allowed)
    assert not check.ok, check.reason
    # The same key without the limit verifies: what refused it was the time, judged now.
    allowed.write_text(f'alice@example.org namespaces="git" {public}\n')
    assert verify_commit(repo, sha, mode="ssh", allowed_signers=allowed).ok
