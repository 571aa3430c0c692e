"""Whether a commit's signature makes it one lanes may act on: the one check the daemon and the CLI share.

A commit is accepted when an allowed signer signed it, or when the daemon's evidence key signed it and it
adds nothing but `evidence/` on top of a commit that is itself accepted (the evidence key vouches for its
measurements, never for a lane). Signature checks fork ssh-keygen or gpg, so a caller may keep a cache.
"""

from __future__ import annotations

import time
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pygit2

from reconciler.source.signatures import EVIDENCE_PRINCIPAL, verify_commit

EVIDENCE_DIR = "evidence"
Verdict = tuple[bool, str | None, str]
"""(accepted, signer, reason)."""


@dataclass(frozen=True)
class Signers:
    mode: Literal["ssh", "gpg"]
    allowed: Path | None
    evidence: Path | None = None

    def stamp(self) -> tuple[str, str]:
        return _stamp(self.allowed), _stamp(self.evidence)


def accepted(
    repo: pygit2.Repository, sha: str, signers: Signers, cache: MutableMapping[tuple[str, ...], Verdict] | None = None
) -> Verdict:
    """The signature verdict on `sha`; `cache` keeps verdicts per commit, signers files and hour."""
    # Judged again each hour: a key's valid-before, or its gpg expiry, is checked at the time of the check.
    key = (sha, signers.mode, *signers.stamp(), str(int(time.time() // 3600)))
    if cache is not None and key in cache:
        return cache[key]
    check = verify_commit(
        repo, sha, mode=signers.mode, allowed_signers=signers.allowed, evidence_signers=signers.evidence
    )
    result: Verdict = (check.ok, check.signer, check.reason)
    if check.ok and check.evidence_only:
        result = _evidence_only(repo, sha, check.signer or EVIDENCE_PRINCIPAL, signers, cache)
    if cache is not None:
        if len(cache) > 256:
            cache.clear()
        cache[key] = result
    return result


def _evidence_only(
    repo: pygit2.Repository,
    sha: str,
    signer: str,
    signers: Signers,
    cache: MutableMapping[tuple[str, ...], Verdict] | None,
) -> Verdict:
    commit = repo[sha].peel(pygit2.Commit)
    assert isinstance(commit, pygit2.Commit)
    if len(commit.parents) != 1:
        return False, None, f"commit {sha[:12]} is signed by the evidence key {signer} but has not one parent"
    parent = commit.parents[0]
    for delta in parent.tree.diff_to_tree(commit.tree).deltas:
        for path in {delta.old_file.path, delta.new_file.path}:
            if not path.startswith(EVIDENCE_DIR + "/"):
                return (
                    False,
                    None,
                    f"commit {sha[:12]} is signed by the evidence key {signer}, which may only add "
                    f"{EVIDENCE_DIR}/, but changes {path}",
                )
    ok, parent_signer, why = accepted(repo, str(parent.id), signers, cache)
    if not ok:
        return False, None, f"commit {sha[:12]} adds evidence on top of a commit that is not accepted: {why}"
    return True, signer, f"commit {sha[:12]}: evidence by {signer} on {str(parent.id)[:12]} ({parent_signer})"


def _stamp(path: Path | None) -> str:
    """A signers file as it is now (path and change time): a changed file is read again."""
    if path is None:
        return ""
    try:
        return f"{path}@{path.stat().st_mtime_ns}"
    except OSError:
        return f"{path}@missing"
