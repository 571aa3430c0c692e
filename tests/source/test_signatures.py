"""Signed heads: real ssh-keygen and gpg signatures on commits built with pygit2."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest

from reconciler.source.signatures import verify_commit
from tests.source.gitutil import commit
from tests.support.signing import gpg_env, gpg_sign, run, signed_commit, ssh_key, ssh_sign

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen is not installed"),
]


@pytest.fixture
def repo(tmp_path: Path) -> pygit2.Repository:
    repository = pygit2.init_repository(str(tmp_path / "state.git"), bare=True, initial_head="main")
    commit(repository, {"state/lanes/a.yaml": b"image: one\n"}, "unsigned start")
    return repository


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Alice's key (allowed), Mallory's key (not listed), and the allowed signers file."""
    alice = ssh_key(tmp_path, "alice")
    mallory = ssh_key(tmp_path, "mallory")
    allowed = tmp_path / "allowed_signers"
    pub = " ".join(Path(str(alice) + ".pub").read_text().split()[:2])
    allowed.write_text(f'alice@example.org namespaces="git" {pub}\n')
    return alice, mallory, allowed


def test_a_commit_signed_by_an_allowed_key_verifies(repo: pygit2.Repository, keys: tuple[Path, Path, Path]) -> None:
    alice, _, allowed = keys
    sha = signed_commit(repo, lambda payload: ssh_sign(alice, payload))
    check = verify_commit(repo, sha, mode="ssh", allowed_signers=allowed)
    assert check.ok, check.reason
    assert check.signer == "alice@example.org"
    # The same check by short sha, as a person would type it.
    assert verify_commit(repo, sha[:10], mode="ssh", allowed_signers=allowed).ok


def test_an_unsigned_commit_is_refused(repo: pygit2.Repository, keys: tuple[Path, Path, Path]) -> None:
    sha = str(repo.references["refs/heads/main"].target)
    check = verify_commit(repo, sha, mode="ssh", allowed_signers=keys[2])
    assert not check.ok and check.signer is None
    assert check.reason == f"commit {sha[:12]} is not signed"


def test_a_key_not_in_the_allowed_signers_is_refused(repo: pygit2.Repository, keys: tuple[Path, Path, Path]) -> None:
    _, mallory, allowed = keys
    sha = signed_commit(repo, lambda payload: ssh_sign(mallory, payload))
    check = verify_commit(repo, sha, mode="ssh", allowed_signers=allowed)
    assert not check.ok
    assert "not in the allowed signers" in check.reason


def test_a_tampered_commit_is_refused(repo: pygit2.Repository, keys: tuple[Path, Path, Path]) -> None:
    alice, _, allowed = keys
    # Alice signed "harmless", the commit says something else: the signature no longer matches.
    sha = signed_commit(repo, lambda payload: ssh_sign(alice, payload), "move glm53 to running\n", sign_as="harmless\n")
    check = verify_commit(repo, sha, mode="ssh", allowed_signers=allowed)
    assert not check.ok
    assert "bad SSH signature" in check.reason


def test_missing_allowed_signers_and_wrong_mode_are_refused(
    repo: pygit2.Repository, keys: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    alice, _, _ = keys
    sha = signed_commit(repo, lambda payload: ssh_sign(alice, payload))
    assert "no allowed signers file" in verify_commit(repo, sha, mode="ssh", allowed_signers=None).reason
    check = verify_commit(repo, sha, mode="ssh", allowed_signers=tmp_path / "nope")
    assert not check.ok
    check = verify_commit(repo, sha, mode="gpg", allowed_signers=None, gpg_home=tmp_path)
    assert not check.ok and "SSH signature; GPG signatures required" in check.reason
    assert not verify_commit(repo, "f" * 40, mode="ssh", allowed_signers=None).ok


# -- GPG -----------------------------------------------------------------------------


@pytest.fixture
def gpg_homes() -> Iterator[tuple[Path, Path, Path]]:
    """A signing home with Alice's key, another with Mallory's, and a verify-only home with Alice's public key.

    Short paths under /tmp: gpg-agent's socket path must fit in a sun_path.
    """
    if shutil.which("gpg") is None or shutil.which("gpgconf") is None:
        pytest.skip("gpg is not installed")
    homes = [Path(tempfile.mkdtemp(prefix="lg", dir="/tmp")) for _ in range(3)]
    try:
        for home, who in zip(
            homes[:2], ("Alice Operator <alice@example.org>", "Mallory <mallory@example.org>"), strict=True
        ):
            home.chmod(0o700)
            run(
                "gpg",
                "--batch",
                "--passphrase",
                "",
                "--quick-gen-key",
                who,
                "ed25519",
                "sign",
                "never",
                env=gpg_env(home),
            )
        homes[2].chmod(0o700)
        public = run("gpg", "--batch", "--armor", "--export", "alice@example.org", env=gpg_env(homes[0]))
        run("gpg", "--batch", "--import", stdin=public, env=gpg_env(homes[2]))
        yield homes[0], homes[1], homes[2]
    finally:
        for home in homes:
            # End the agents these homes started (and only those), then remove the homes.
            subprocess.run(
                ["gpgconf", "--kill", "all"], env=gpg_env(home), capture_output=True, check=False, timeout=30
            )
            shutil.rmtree(home, ignore_errors=True)


def test_gpg_signatures_good_and_from_an_unknown_key(
    repo: pygit2.Repository, gpg_homes: tuple[Path, Path, Path]
) -> None:
    alice_home, mallory_home, verify_home = gpg_homes
    good = signed_commit(repo, lambda payload: gpg_sign(alice_home, payload))
    check = verify_commit(repo, good, mode="gpg", allowed_signers=None, gpg_home=verify_home)
    assert check.ok, check.reason
    assert check.signer is not None and "alice@example.org" in check.signer
    stranger = signed_commit(repo, lambda payload: gpg_sign(mallory_home, payload))
    check = verify_commit(repo, stranger, mode="gpg", allowed_signers=None, gpg_home=verify_home)
    assert not check.ok and "not in the keyring" in check.reason
    tampered = signed_commit(repo, lambda payload: gpg_sign(alice_home, payload), "other\n", sign_as="signed\n")
    check = verify_commit(repo, tampered, mode="gpg", allowed_signers=None, gpg_home=verify_home)
    assert not check.ok and "bad GPG signature" in check.reason
    # An SSH-mode check of a GPG-signed head says what is wrong.
    assert (
        "GPG signature; SSH signatures required" in verify_commit(repo, good, mode="ssh", allowed_signers=None).reason
    )
