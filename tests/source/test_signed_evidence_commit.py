"""Evidence commits through a mirror: signed with the daemon's SSH key when asked, and never built on a head
that is not one of the commits allowed as parents."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reconciler.errors import TransientError
from reconciler.source.evidence import commit_evidence
from reconciler.source.mirror import Mirror
from reconciler.source.signatures import verify_commit
from tests.support.gitrepo import StateRepo
from tests.support.signing import ssh_key

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen is not installed"),
]


def test_a_signed_evidence_commit_on_the_verified_head_and_none_on_another(tmp_path: Path) -> None:
    key = ssh_key(tmp_path, "daemon")
    allowed = tmp_path / "allowed_signers"
    public = " ".join(Path(f"{key}.pub").read_text().split()[:2])
    allowed.write_text(f'lanes-evidence@control namespaces="git" {public}\n')
    origin = StateRepo(tmp_path / "origin.git", bare=True)
    verified = origin.commit({"state/fleet.yaml": b"a: 1\n"}, "verified")
    mirror = Mirror(str(origin.path), tmp_path / "mirror")
    mirror.fetch()
    files = {"evidence/x/1.json": b"{}\n"}
    sha = commit_evidence(mirror, files, "evidence: x\n", branch="main", signing_key=key, parents={verified})
    assert origin.head() == sha
    check = verify_commit(mirror.repo, sha, mode="ssh", allowed_signers=allowed)
    assert check.ok and check.evidence_only and check.signer == "lanes-evidence@control", check.reason

    # Someone pushes a commit the daemon did not verify: no evidence is signed on top of it.
    other = origin.commit({"state/fleet.yaml": b"a: 2\n"}, "unverified")
    with pytest.raises(TransientError, match="not a verified commit"):
        commit_evidence(mirror, files, "evidence: x\n", branch="main", signing_key=key, parents={verified, sha})
    assert origin.head() == other
