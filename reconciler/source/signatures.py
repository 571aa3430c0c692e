"""Is a commit signed by someone allowed to change the fleet?

With `require_signed_commits`, whoever can push to the state repo is not
enough: the head commit must carry an SSH or GPG signature from a key the
operators listed. This checks a commit exactly as `git verify-commit` would,
with the same tools: `ssh-keygen -Y find-principals` / `-Y verify` in the
"git" namespace against an allowed-signers file, or `gpg --verify` against a
keyring that holds only the allowed keys. Argv lists only, never a shell;
the signature and payload are read from the commit object by libgit2
(`Commit.gpg_signature`), so what is verified is what would be applied.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pygit2

SSH_NAMESPACE = "git"
EVIDENCE_PRINCIPAL = "lanes-evidence"
"""The principal (alone, or as `lanes-evidence@<host>`) that declares a key in the allowed signers as the
daemon's own, for its evidence commits: a commit it signs is accepted only when it adds nothing but
files under `evidence/` on top of a commit that is itself accepted (the decider checks that)."""
TOOL_TIMEOUT_S = 30.0

_SSH_ARMOR = b"-----BEGIN SSH SIGNATURE-----"
_PGP_ARMOR = b"-----BEGIN PGP SIGNATURE-----"


@dataclass(frozen=True)
class SignatureCheck:
    ok: bool
    signer: str | None
    reason: str
    evidence_only: bool = False
    """Signed by the daemon's evidence key: good only for a commit that touches nothing but `evidence/`."""


def is_evidence_principal(principal: str) -> bool:
    return principal == EVIDENCE_PRINCIPAL or principal.startswith(EVIDENCE_PRINCIPAL + "@")


def _short(sha: str) -> str:
    return sha[:12]


def _run(argv: list[str], *, stdin: bytes | None = None, env: dict[str, str] | None = None) -> tuple[int, str]:
    try:
        result = subprocess.run(argv, input=stdin, capture_output=True, timeout=TOOL_TIMEOUT_S, env=env, check=False)
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]} timed out after {TOOL_TIMEOUT_S:.0f} s"
    output = (result.stdout + b"\n" + result.stderr).decode("utf-8", "replace").strip()
    return result.returncode, output


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


def verify_commit(
    repo: pygit2.Repository,
    sha: str,
    *,
    mode: Literal["ssh", "gpg"],
    allowed_signers: Path | None,
    gpg_home: Path | None = None,
    evidence_signers: Path | None = None,
) -> SignatureCheck:
    """Whether commit `sha` is signed by an allowed key; never raises for a bad signature.

    `evidence_signers`: an SSH allowed-signers file that declares the daemon's evidence key (principal
    `lanes-evidence`). Only evidence principals are taken from it, in either mode: with GPG signing a
    person still signs with GPG, and the daemon's SSH-signed evidence commits are checked here.
    """
    try:
        commit = repo.revparse_single(sha).peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError) as exc:
        return SignatureCheck(False, None, f"commit {_short(sha)} not found: {exc}")
    assert isinstance(commit, pygit2.Commit)
    full = str(commit.id)
    signature, payload = commit.gpg_signature
    if not signature or payload is None:
        return SignatureCheck(False, None, f"commit {_short(full)} is not signed")
    is_ssh = signature.lstrip().startswith(_SSH_ARMOR)
    is_pgp = signature.lstrip().startswith(_PGP_ARMOR)
    if is_ssh and evidence_signers is not None and (mode == "gpg" or evidence_signers != allowed_signers):
        check = _verify_ssh(full, signature, payload, evidence_signers)
        if check.ok and check.evidence_only:
            return check
        if mode == "gpg":
            why = check.reason if not check.ok else f"{check.signer} is not an evidence principal"
            return SignatureCheck(
                False, None, f"commit {_short(full)} has an SSH signature; GPG signatures required ({why})"
            )
    if mode == "ssh":
        if not is_ssh:
            kind = "a GPG" if is_pgp else "an unknown kind of"
            return SignatureCheck(False, None, f"commit {_short(full)} has {kind} signature; SSH signatures required")
        return _verify_ssh(full, signature, payload, allowed_signers)
    if not is_pgp:
        kind = "an SSH" if is_ssh else "an unknown kind of"
        return SignatureCheck(False, None, f"commit {_short(full)} has {kind} signature; GPG signatures required")
    if gpg_home is not None:
        return _verify_gpg(full, signature, payload, gpg_home)
    return _verify_gpg_with(full, signature, payload, allowed_signers)


def _verify_time() -> str:
    """Now, never the commit's own dates: the signer writes those.

    `git verify-commit` passes the committer date (`-Overify-time=`, git's gpg-interface.c since 2.34), so
    a key past its `valid-before` still signs "old" commits; ssh-keygen(1) on `-O verify-time=timestamp`:
    "Specifies a time to use when validating signatures instead of the current time". We pass the
    current time explicitly, which is also ssh-keygen's default without the option.
    """
    return time.strftime("%Y%m%d%H%M%S", time.gmtime()) + "Z"


def _verify_ssh(sha: str, signature: bytes, payload: bytes, allowed_signers: Path | None) -> SignatureCheck:
    if allowed_signers is None or not allowed_signers.is_file():
        return SignatureCheck(False, None, f"no allowed signers file at {allowed_signers}; cannot verify {_short(sha)}")
    tool = shutil.which("ssh-keygen")
    if tool is None:
        return SignatureCheck(False, None, "ssh-keygen is not installed; cannot verify SSH signatures")
    verify_time = f"verify-time={_verify_time()}"
    with tempfile.TemporaryDirectory(prefix="lanes-sig-") as tmp:
        sigfile = Path(tmp) / "commit.sig"
        sigfile.write_bytes(signature)
        # find-principals only matches the key against the file; -Y verify below checks the signature.
        code, out = _run(
            [tool, "-Y", "find-principals", "-s", str(sigfile), "-f", str(allowed_signers), "-O", verify_time]
        )
        principals = [line.strip() for line in out.splitlines() if line.strip()] if code == 0 else []
        # find-principals prints principals on stdout; stderr lines from a failure are not principals.
        principals = [p for p in principals if " " not in p]
        if not principals:
            return SignatureCheck(
                False, None, f"commit {_short(sha)} is signed by a key not in the allowed signers ({_last_line(out)})"
            )
        reasons = []
        # A person's principal first: a key listed for both is a person's key.
        for principal in sorted(principals, key=is_evidence_principal):
            code, out = _run(
                [
                    tool,
                    "-Y",
                    "verify",
                    "-f",
                    str(allowed_signers),
                    "-I",
                    principal,
                    "-n",
                    SSH_NAMESPACE,
                    "-s",
                    str(sigfile),
                    "-O",
                    verify_time,
                ],
                stdin=payload,
            )
            if code == 0:
                return SignatureCheck(
                    True,
                    principal,
                    f"commit {_short(sha)}: good signature by {principal}",
                    evidence_only=is_evidence_principal(principal),
                )
            reasons.append(_last_line(out))
    return SignatureCheck(False, None, f"commit {_short(sha)}: bad SSH signature: {'; '.join(reasons)}")


def _verify_gpg_with(sha: str, signature: bytes, payload: bytes, allowed: Path | None) -> SignatureCheck:
    """Verify against a private keyring (GNUPGHOME) holding only the keys of the `allowed_signers` export.

    Built afresh for each check in a short temporary folder and removed after: no key a person or another
    tool imported elsewhere is trusted, and a key removed from the file is no longer accepted.
    """
    if allowed is None or not allowed.is_file():
        return SignatureCheck(False, None, f"no allowed signers file at {allowed}; cannot verify {_short(sha)}")
    tool = shutil.which("gpg")
    if tool is None:
        return SignatureCheck(False, None, "gpg is not installed on this host; cannot verify GPG signatures")
    # Short: gpg puts its sockets in the home and a sun_path holds 108 bytes.
    home = Path(tempfile.mkdtemp(prefix="lanes-gpg-", dir="/tmp" if Path("/tmp").is_dir() else None))
    try:
        home.chmod(0o700)
        code, out = _run(
            [tool, "--homedir", str(home), "--batch", "--no-tty", "--quiet", "--import", str(allowed)],
            env=_gpg_env(home),
        )
        if code != 0:
            return SignatureCheck(False, None, f"the allowed signers {allowed} do not import: {_last_line(out)}")
        return _verify_gpg(sha, signature, payload, home)
    finally:
        gpgconf = shutil.which("gpgconf")
        if gpgconf is not None:  # an agent or dirmngr this home started ends with it
            _run([gpgconf, "--homedir", str(home), "--kill", "all"], env=_gpg_env(home))
        shutil.rmtree(home, ignore_errors=True)


def _gpg_env(home: Path) -> dict[str, str]:
    return {"GNUPGHOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}


def _verify_gpg(sha: str, signature: bytes, payload: bytes, gpg_home: Path | None) -> SignatureCheck:
    tool = shutil.which("gpg")
    if tool is None:
        return SignatureCheck(False, None, "gpg is not installed on this host; cannot verify GPG signatures")
    if gpg_home is None or not gpg_home.is_dir():
        return SignatureCheck(False, None, f"no GPG keyring directory at {gpg_home}; cannot verify {_short(sha)}")
    with tempfile.TemporaryDirectory(prefix="lanes-sig-") as tmp:
        sigfile = Path(tmp) / "commit.asc"
        sigfile.write_bytes(signature)
        # No time is handed to gpg: it reports a key that is expired or revoked as of now (EXPKEYSIG, REVKEYSIG
        # in gnupg's doc/DETAILS, "the signature was made by an expired key") and an expired signature
        # (EXPSIG), all refused below, so the creation time the signer wrote does not keep a stale key good.
        # The keyring holds only allowed keys: their owner trust is not asked (--trust-model always).
        argv = [tool, "--homedir", str(gpg_home), "--batch", "--no-tty", "--trust-model", "always", "--status-fd", "1"]
        argv += ["--verify", str(sigfile), "-"]
        code, out = _run(argv, stdin=payload)
    status = [line.split()[1:] for line in out.splitlines() if line.startswith("[GNUPG:] ")]
    keywords = {words[0] for words in status if words}
    good = next((words for words in status if words and words[0] == "GOODSIG"), None)
    valid = next((words for words in status if words and words[0] == "VALIDSIG"), None)
    if code == 0 and good and valid and not keywords & {"BADSIG", "ERRSIG", "EXPSIG", "EXPKEYSIG", "REVKEYSIG"}:
        signer = f"{' '.join(good[2:])} ({valid[1]})"
        return SignatureCheck(True, signer, f"commit {_short(sha)}: good signature by {signer}")
    if "NO_PUBKEY" in keywords or "ERRSIG" in keywords:
        return SignatureCheck(False, None, f"commit {_short(sha)} is signed by a key not in the keyring {gpg_home}")
    if "BADSIG" in keywords:
        return SignatureCheck(False, None, f"commit {_short(sha)}: bad GPG signature")
    if "EXPKEYSIG" in keywords:
        return SignatureCheck(False, None, f"commit {_short(sha)}: the signing key has expired")
    if "REVKEYSIG" in keywords:
        return SignatureCheck(False, None, f"commit {_short(sha)}: the signing key is revoked")
    return SignatureCheck(False, None, f"commit {_short(sha)}: GPG verification failed: {_last_line(out)}")


def ssh_sign(key: Path, payload: bytes) -> bytes:
    """An SSH signature over `payload` in the "git" namespace, as `git commit -S` with gpg.format=ssh makes.

    The daemon signs its evidence commits with its own key this way (`ssh-keygen -Y sign`, reading the
    payload on stdin and writing the armored signature on stdout).
    """
    tool = shutil.which("ssh-keygen")
    if tool is None:
        raise OSError("ssh-keygen is not installed; cannot sign evidence commits")
    try:
        result = subprocess.run(
            [tool, "-q", "-Y", "sign", "-n", SSH_NAMESPACE, "-f", str(key)],
            input=payload,
            capture_output=True,
            timeout=TOOL_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise OSError(f"ssh-keygen -Y sign timed out after {TOOL_TIMEOUT_S:.0f} s") from exc
    if result.returncode != 0 or not result.stdout.startswith(_SSH_ARMOR):
        raise OSError(f"ssh-keygen -Y sign with {key} failed: {_last_line(result.stderr.decode('utf-8', 'replace'))}")
    return result.stdout
