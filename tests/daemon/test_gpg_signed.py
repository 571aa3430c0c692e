"""GPG mode end to end, with real gpg, through the real daemon process: the keyring is built from the
`allowed_signers` export; a commit signed by an allowed key is applied, an unsigned one and one signed by
another key are refused."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pygit2
import pytest

from reconciler.source.signatures import verify_commit
from tests.support.evidencerepo import decided_evidence, evidence_on
from tests.support.example import EUGR, PRODUCTION, example_state, fast, fast_files, loaded
from tests.support.signing import gpg_sign, run, ssh_key
from tests.support.sparks import loopback
from tests.support.waiting import wait_for
from tests.support.world import world_over

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
_salt = itertools.count(211)


def _env(home: Path) -> dict[str, str]:
    return {"GNUPGHOME": str(home), "PATH": "/usr/bin:/bin:/usr/local/bin"}


@pytest.fixture
def homes() -> Iterator[tuple[Path, Path]]:
    """Alice's signing home (her key is allowed) and Mallory's (not allowed); short paths for gpg's sockets."""
    if shutil.which("gpg") is None or shutil.which("gpgconf") is None:
        pytest.skip("gpg is not installed")
    made = [Path(tempfile.mkdtemp(prefix="lg", dir="/tmp")) for _ in range(2)]
    try:
        people = ("Alice Operator <alice@example.org>", "Mallory <mallory@example.org>")
        for home, who in zip(made, people, strict=True):
            home.chmod(0o700)
            gen = ("--quick-gen-key", who, "ed25519", "sign", "never")
            run("gpg", "--batch", "--passphrase", "", *gen, env=_env(home))
        yield made[0], made[1]
    finally:
        for home in made:
            subprocess.run(["gpgconf", "--kill", "all"], env=_env(home), capture_output=True, check=False, timeout=30)
            shutil.rmtree(home, ignore_errors=True)


def gpg_commit(repo: pygit2.Repository, home: Path | None, files: dict[str, bytes], message: str) -> str:
    """A commit of `files` onto main, GPG-signed from `home` (unsigned when None)."""
    index = pygit2.Index()
    for p, data in sorted(files.items()):
        index.add(pygit2.IndexEntry(p, repo.create_blob(data), pygit2.enums.FileMode.BLOB))
    tree = index.write_tree(repo)
    ref = repo.references.get("refs/heads/main")
    parents = [ref.target] if ref is not None else []
    who = pygit2.Signature("Alice Operator", "alice@example.org")
    if home is None:
        oid = repo.create_commit(None, who, who, message, tree, parents)
    else:
        content = str(repo.create_commit_string(who, who, message, tree, parents))
        oid = repo.create_commit_with_signature(content, gpg_sign(home, content))
    repo.references.create("refs/heads/main", oid, force=True)
    return str(oid)


async def test_gpg_signed_heads_apply_and_others_are_refused(tmp_path: Path, homes: tuple[Path, Path]) -> None:
    alice, mallory = homes
    allowed = tmp_path / "allowed.asc"
    allowed.write_bytes(run("gpg", "--batch", "--armor", "--export", "alice@example.org", env=_env(alice)))
    async with world_over(loaded(fast(example_state())), tmp_path, tmp_path / "simwork", loopback(next(_salt))) as w:
        git = w.repo.repo
        unsigned = gpg_commit(git, None, fast_files(), "unsigned fleet\n")
        d = w.add_daemon("daemon", extra=f'require_signed_commits = "gpg"\nallowed_signers = "{allowed}"')
        await d.start()
        await wait_for(lambda: w.outcome(unsigned) == "refused", 30, "the unsigned head refused")
        assert "is not signed" in w.commit_outcome(unsigned)["detail"]["refused"]

        good = gpg_commit(git, alice, fast_files(), "signed fleet\n")
        await w.deployed(good)
        # The decision is recorded when the cycle ends, a moment after the ranks run.
        await wait_for(lambda: w.outcome(good) == "applied", 30, "the signed head recorded as applied")

        stranger = gpg_commit(git, mallory, fast_files(**{EUGR: {"max_num_seqs": 4}}), "eugr: 4 sequences\n")
        await wait_for(lambda: w.outcome(stranger) == "refused", 30, "the head signed by another key refused")
        assert "not in the keyring" in w.commit_outcome(stranger)["detail"]["refused"]
        assert w.health(EUGR) == ("healthy", good)


def evidence_signer(keys: Path) -> tuple[Path, Path]:
    """A key of the daemon's own for evidence, and an SSH allowed-signers file declaring it for evidence only."""
    keys.mkdir()
    key = ssh_key(keys, "evidence")
    signers = keys / "evidence_signers"
    public = " ".join(Path(f"{key}.pub").read_text().split()[:2])
    signers.write_text(f'lanes-evidence namespaces="git" {public}\n')
    return key, signers


async def test_gpg_signing_and_bench_work_together(tmp_path: Path, homes: tuple[Path, Path]) -> None:
    """People sign with GPG; the daemon signs its evidence with its own SSH key, declared for evidence alone in
    `repo.evidence_signers` and set apart from the key it reaches the hosts with (`bench.signing_key`)."""
    alice, _ = homes
    allowed = tmp_path / "allowed.asc"
    allowed.write_bytes(run("gpg", "--batch", "--armor", "--export", "alice@example.org", env=_env(alice)))
    evidence_key, evidence_signers = evidence_signer(tmp_path / "keys")
    quick: dict[str, dict[str, Any]] = {EUGR: {"bench_profile": "quick"}, PRODUCTION: {"bench_profile": "quick"}}
    async with world_over(loaded(fast(example_state())), tmp_path, tmp_path / "simwork", loopback(next(_salt))) as w:
        git = w.repo.repo
        start = gpg_commit(git, alice, fast_files(**quick), "signed fleet, benchmarked\n")
        d = w.add_daemon(
            "daemon",
            extra=f'require_signed_commits = "gpg"\nallowed_signers = "{allowed}"\n'
            f'evidence_signers = "{evidence_signers}"',
        )
        d.config.write_text(d.config.read_text() + f'[bench]\nenabled = true\nsigning_key = "{evidence_key}"\n')
        await d.start()
        await w.deployed(start)

        head = await decided_evidence(w)
        assert w.outcome(head) == "applied", w.commit_outcome(head)
        check = verify_commit(git, head, mode="gpg", allowed_signers=allowed, evidence_signers=evidence_signers)
        assert check.ok and check.signer == "lanes-evidence" and check.evidence_only
        # The evidence key is not the one the daemon reaches the hosts with, and vouches for nothing else.
        assert verify_commit(git, head, mode="gpg", allowed_signers=allowed).ok is False
        assert not d.events("commit.refused")

        # A person's next GPG-signed change on top of the evidence is applied as usual.
        bump = gpg_commit(git, alice, fast_files(**{**quick, EUGR: {**quick[EUGR], "max_num_seqs": 4}}), "eugr: 4\n")
        await wait_for(lambda: w.outcome(bump) == "applied", 60, "the next signed change applied")
        # The bench may already have committed evidence on top of it, which the lane then runs at.
        state, at = w.health(EUGR)
        assert state == "healthy" and at is not None and evidence_on(w, at, bump), (state, at, bump)
