"""The daemon's evidence key vouches for `evidence/` alone: a commit it signs is accepted only when it adds
nothing but evidence on top of a commit that is itself accepted."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pygit2
import pytest

from reconciler.daemon.config import parse_config
from reconciler.daemon.decider import CommitDecider
from reconciler.daemon.metrics import Metrics
from reconciler.source.mirror import Mirror
from reconciler.store.journal import Store
from tests.support.gitrepo import StateRepo
from tests.support.signing import sign_files, ssh_key

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen is not installed"),
]
STATE = {"state/fleet.yaml": b"ssh_user: lanes\n", "policies/rules.yaml": b"rules: {}\n"}


def decider(tmp: Path, repo: Path, allowed: Path) -> CommitDecider:
    config = parse_config(
        f'[repo]\nurl = "{repo}"\nmirror_dir = "{tmp}/mirror"\nrequire_signed_commits = "ssh"\n'
        f'allowed_signers = "{allowed}"\n[ssh]\nkey = "{tmp}/key"\nknown_hosts = "{tmp}/kh"\n'
        f'[daemon]\ndb = "{tmp}/lanes.db"\n'
    )
    mirror = Mirror(str(repo), tmp / "mirror")
    mirror.fetch()
    runner: Any = None  # refusals never reach the hosts
    return CommitDecider(config, Store(tmp / "lanes.db"), runner, mirror, Metrics())


def test_the_evidence_key_signs_evidence_only_on_accepted_commits(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    alice, daemon = ssh_key(keys, "alice"), ssh_key(keys, "daemon")
    allowed = keys / "allowed_signers"
    public = {k: " ".join(Path(f"{k}.pub").read_text().split()[:2]) for k in (alice, daemon)}
    allowed.write_text(
        f'alice@example.org namespaces="git" {public[alice]}\nlanes-evidence namespaces="git" {public[daemon]}\n'
    )
    origin = StateRepo(tmp_path / "origin.git", bare=True)
    git = origin.repo
    good = sign_files(git, alice, STATE, "signed state\n")
    evidence = sign_files(git, daemon, {**STATE, "evidence/a/1.json": b"{}\n"}, "evidence: a\n")
    d = decider(tmp_path, origin.path, allowed)
    assert d.refusal(good) is None
    assert d.refusal(evidence) is None

    # The same key changing a state file: refused.
    state = sign_files(git, daemon, {**STATE, "state/fleet.yaml": b"ssh_user: root\n"}, "evidence: sneaky\n")
    d.mirror.fetch()
    why = d.refusal(state)
    assert why is not None and "may only add evidence/, but changes state/fleet.yaml" in why

    # Evidence on top of an unsigned commit does not make it acceptable.
    unsigned = origin.commit({**STATE, "state/fleet.yaml": b"ssh_user: mallory\n"}, "unsigned", parents=[good])
    on_top = sign_files(
        git, daemon, {**STATE, "state/fleet.yaml": b"ssh_user: mallory\n", "evidence/a/2.json": b"{}\n"}, "ev\n"
    )
    d.mirror.fetch()
    assert git[on_top].parents[0].id == pygit2.Oid(hex=unsigned)  # type: ignore[attr-defined]
    why = d.refusal(on_top)
    assert why is not None and "not accepted" in why and "is not signed" in why
    d.store.close()
