"""Signed commits as `git commit -S` makes them: real ssh-keygen and gpg signatures over commits built with
pygit2, an allowed signers file, and a signed commit of the example state onto a world's main branch."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pygit2

from tests.support.example import fast_files
from tests.support.world import World


def run(*argv: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
    result = subprocess.run(list(argv), input=stdin, capture_output=True, check=False, timeout=30, env=env)
    assert result.returncode == 0, f"{argv}: {result.stderr.decode(errors='replace')}"
    return result.stdout


def ssh_key(directory: Path, name: str) -> Path:
    key = directory / name
    run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key))
    return key


def ssh_sign(key: Path, payload: str) -> str:
    """`ssh-keygen -Y sign -n git`, which is what `git commit -S` runs with gpg.format=ssh."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "payload"
        data.write_text(payload)
        run("ssh-keygen", "-Y", "sign", "-n", "git", "-f", str(key), str(data))
        return (Path(tmp) / "payload.sig").read_text()


def signed_commit(
    repo: pygit2.Repository, sign: object, message: str = "signed change\n", *, sign_as: str | None = None
) -> str:
    """A commit on main whose object carries a gpgsig header over `sign_as` (default: itself)."""
    parent = repo.references["refs/heads/main"].target
    tree = repo[parent].tree_id  # type: ignore[attr-defined]
    who = pygit2.Signature("Alice Operator", "alice@example.org")
    # The stub says Oid; libgit2 returns the commit object's text, which is what gets signed.
    content = str(repo.create_commit_string(who, who, message, tree, [parent]))
    signed_payload = content if sign_as is None else str(repo.create_commit_string(who, who, sign_as, tree, [parent]))
    signature = sign(signed_payload)  # type: ignore[operator]
    oid = repo.create_commit_with_signature(content, signature)
    repo.references.create("refs/heads/main", oid, force=True)
    return str(oid)


def gpg_env(home: Path) -> dict[str, str]:
    return {"GNUPGHOME": str(home), "PATH": "/usr/bin:/bin:/usr/local/bin"}


def gpg_sign(home: Path, payload: str) -> str:
    out = run(
        "gpg",
        "--batch",
        "--pinentry-mode",
        "loopback",
        "--passphrase",
        "",
        "--armor",
        "--detach-sign",
        stdin=payload.encode(),
        env=gpg_env(home),
    )
    return out.decode()


def signed(world: World, key: Path, message: str, changes: dict[str, dict[str, Any]] | None = None) -> str:
    """A commit of the example state with `changes`, signed by `key` as `git commit -S` does, onto main."""
    return sign_files(world.repo.repo, key, fast_files(**(changes or {})), message)


def sign_files(
    repo: pygit2.Repository, key: Path, files: dict[str, bytes], message: str, parents: list[str] | None = None
) -> str:
    index = pygit2.Index()
    for p, data in sorted(files.items()):
        index.add(pygit2.IndexEntry(p, repo.create_blob(data), pygit2.enums.FileMode.BLOB))
    tree = index.write_tree(repo)
    if parents is None:
        ref = repo.references.get("refs/heads/main")
        parents = [str(ref.target)] if ref is not None else []
    who = pygit2.Signature("Alice Operator", "alice@example.org")
    content = str(repo.create_commit_string(who, who, message, tree, [pygit2.Oid(hex=p) for p in parents]))
    oid = repo.create_commit_with_signature(content, ssh_sign(key, content))
    repo.references.create("refs/heads/main", oid, force=True)
    return str(oid)


def allowed_signers(directory: Path) -> tuple[Path, Path]:
    """Alice's key and an allowed signers file naming it."""
    directory.mkdir(parents=True, exist_ok=True)
    alice = ssh_key(directory, "alice")
    allowed = directory / "allowed_signers"
    public = " ".join(Path(f"{alice}.pub").read_text().split()[:2])
    allowed.write_text(f'alice@example.org namespaces="git" {public}\n')
    return alice, allowed
