"""Proposal branches in the state repo: one commit on the tracked head, pushed, trailers read back.

Proposals are written as git objects (blob, tree, commit) straight into the
repository with pygit2, never through a working tree: the daemon's clone may
be bare, and a person's checkout must not see its files change. A push can
be rejected when another proposer (a second daemon, a restart that lost its
database) got there first; the remote is then fetched and its branch read:
a commit that carries the same `Lane:` and `Upstream:` trailers is the same
proposal and is adopted instead of duplicated.
"""

from __future__ import annotations

import re
import time

import pygit2

from reconciler.errors import PermanentError, TransientError

PROPOSAL_PREFIX = "lanes/proposals"
_TRAILER = re.compile(r"^([A-Za-z][A-Za-z0-9-]*): (.+)$")


def proposal_branch(lane: str, version: str) -> str:
    name = f"{PROPOSAL_PREFIX}/{lane}/{version}"
    if not pygit2.reference_is_valid_name(f"refs/heads/{name}"):
        raise PermanentError(f"'{name}' is not a valid branch name")
    return name


def trailers(message: str) -> dict[str, str]:
    """The `Key: value` lines of a commit message's last paragraph."""
    paragraphs = [p for p in message.strip().split("\n\n") if p.strip()]
    if not paragraphs:
        return {}
    out: dict[str, str] = {}
    for line in paragraphs[-1].splitlines():
        match = _TRAILER.match(line.strip())
        if match is None:
            return {}
        out[match.group(1)] = match.group(2).strip()
    return out


def commit_file(
    repo: pygit2.Repository,
    parent: pygit2.Commit,
    path: str,
    data: bytes,
    message: str,
    signature: pygit2.Signature,
) -> pygit2.Oid:
    """A commit on `parent` whose tree differs in `path` only; no ref moves."""
    index = pygit2.Index()
    index.read_tree(parent.tree)
    mode = index[path].mode if path in index else pygit2.enums.FileMode.BLOB
    index.add(pygit2.IndexEntry(path, repo.create_blob(data), pygit2.enums.FileMode(mode)))
    tree = index.write_tree(repo)
    return repo.create_commit(None, signature, signature, message, tree, [parent.id])


def signature(name: str, email: str) -> pygit2.Signature:
    return pygit2.Signature(name, email, int(time.time()), 0)


class _Callbacks(pygit2.RemoteCallbacks):
    """Collects per-reference rejections, which libgit2 reports here rather than by raising."""

    def __init__(self, credentials: pygit2.UserPass | None) -> None:
        super().__init__(credentials=credentials)
        self.rejected: dict[str, str] = {}

    def push_update_reference(self, refname: str, message: str) -> None:
        if message:
            self.rejected[refname] = message


def credentials(value: str | None) -> pygit2.UserPass | None:
    """`user:token` from a credential file, for an https remote."""
    if not value:
        return None
    user, sep, token = value.partition(":")
    return pygit2.UserPass(user, token) if sep else pygit2.UserPass("x-access-token", value)


def fetch(repo: pygit2.Repository, remote: str, creds: pygit2.UserPass | None = None) -> None:
    try:
        repo.remotes[remote].fetch(callbacks=_Callbacks(creds), prune=pygit2.enums.FetchPrune.PRUNE)
    except KeyError:
        raise PermanentError(f"the state repository has no remote '{remote}'") from None
    except pygit2.GitError as exc:
        raise TransientError(f"fetch from '{remote}' failed: {exc}") from None


def push(repo: pygit2.Repository, remote: str, branch: str, creds: pygit2.UserPass | None = None) -> str | None:
    """Push a branch; the remote's reason when it refuses the update, None when it took it."""
    ref = f"refs/heads/{branch}"
    callbacks = _Callbacks(creds)
    try:
        repo.remotes[remote].push([f"{ref}:{ref}"], callbacks=callbacks)
    except KeyError:
        raise PermanentError(f"the state repository has no remote '{remote}'") from None
    except pygit2.GitError as exc:
        text = str(exc)
        flat = text.replace("-", "").lower()
        if "fastforward" in flat or "rejected" in flat:  # libgit2: "cannot push non-fastforwardable reference"
            return text
        raise TransientError(f"push of {branch} to '{remote}' failed: {text}") from None
    return callbacks.rejected.get(ref)


def remote_branch(repo: pygit2.Repository, remote: str, branch: str) -> pygit2.Commit | None:
    """The commit a remote-tracking branch points at after the last fetch."""
    try:
        ref = repo.references[f"refs/remotes/{remote}/{branch}"]
    except KeyError:
        return None
    commit = ref.peel(pygit2.Commit)
    return commit if isinstance(commit, pygit2.Commit) else None
