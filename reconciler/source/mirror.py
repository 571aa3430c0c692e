"""A bare mirror of the state repository on the control node.

The daemon never reads a person's working tree: it fetches the configured
branch into a bare repository it owns and reconciles toward the commit the
branch points at. The fetch is forced (`+refs/heads/B:...`) because a
force-pushed branch is still what the team wants running; the mirror must
follow it, not refuse it. Verdict notes (`refs/notes/lanes`) travel the other
way: written here, pushed to the remote, merged when someone else pushed
notes first.

Transports: local paths and `file://` go through libgit2 (pygit2). `ssh://`
and `user@host:path` remotes go through the `git` command and OpenSSH,
because pygit2 hands its certificate callback no host key and accepts any SSH
host key once callbacks are set: a pinned known_hosts file (no trust on first
use) can only be enforced by OpenSSH. `https://` goes through libgit2, which
verifies TLS itself.

Credentials for an https remote never live in the URL: a `user:token@` in
the configured URL is taken out of it (the mirror's git config, messages,
/status and logs see the URL without it) and sent as HTTP credentials, as is
the token of `credential_file` (`user:token`, or a token alone, sent with the
user `x-access-token`, which GitHub, Gitea and Forgejo accept). Only ever
over https: a plain-http remote gets no credential.

Fetches, pushes and note writes take turns on one lock (`Mirror.lock`): the
daemon fetches in one worker thread while a verdict's note is written and
pushed in another, and git fails a ref that two of them update at once.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import threading
from pathlib import Path
from typing import Literal

import pygit2
import structlog

from reconciler.errors import TransientError
from reconciler.source.notes import NOTES_REF, merge_notes

log = structlog.get_logger(__name__)

NOTES_TRACKING_REF = "refs/notes-origin/lanes"
"""Where the remote's notes land; outside refs/notes/ so `git log --notes=*` does not show them twice."""

NOTES_FETCH_SPEC = "+refs/notes/*:refs/notes-origin/*"
"""A pattern, not `refs/notes/lanes` itself: git fails a fetch naming a ref the remote lacks, a pattern
matching nothing is fine. Never fetched straight into refs/notes/lanes: that would drop notes written
here and not pushed yet (the remote was down); they are merged instead."""

BRANCHES_TRACKING_REF = "refs/lanes-branches/"
"""Where side branches the daemon reads (trial branches) land; never under refs/heads/, which it writes."""

PUSH_ATTEMPTS = 3
GIT_TIMEOUT_S = 120.0

Transport = Literal["auto", "libgit2", "git"]

_SCP_LIKE = re.compile(r"^[\w.-]+@[\w.-]+:(?!//)")


def is_ssh_url(url: str) -> bool:
    return url.startswith(("ssh://", "git+ssh://", "ssh+git://")) or bool(_SCP_LIKE.match(url))


DEFAULT_HTTP_USER = "x-access-token"
"""The user sent with a token that names none (GitHub, Gitea and Forgejo take any user with a token)."""


def split_userinfo(url: str) -> tuple[str, tuple[str, str] | None]:
    """(the URL without `user:password@`, the (user, password) taken out) for http(s) URLs.

    Other URLs are returned as they are: an ssh user (`ssh://git@host/...`,
    `git@host:path`) is a login name, not a secret.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        return url, None
    authority, slash, path = rest.partition("/")
    if "@" not in authority:
        return url, None
    userinfo, _, host = authority.rpartition("@")
    user, colon, password = userinfo.partition(":")
    found = (user, password) if colon else (DEFAULT_HTTP_USER, user)
    return f"{scheme}://{host}{slash}{path}", found


def public_url(url: str) -> str:
    """The URL as it may be shown: without credentials."""
    return split_userinfo(url)[0]


def read_http_credential(path: Path) -> tuple[str, str]:
    """(user, token) from a credential file: `user:token`, or a token alone."""
    try:
        text = path.read_text().strip()
    except OSError as exc:
        raise TransientError(f"repository credential {path} cannot be read: {exc.strerror}") from None
    if not text:
        raise TransientError(f"repository credential {path} is empty")
    user, colon, token = text.partition(":")
    return (user, token) if colon else (DEFAULT_HTTP_USER, text)


class _PushCallbacks(pygit2.RemoteCallbacks):
    """Collects per-ref rejections: a remote hook can refuse a ref while the push call succeeds."""

    def __init__(self, credentials: pygit2.Keypair | pygit2.UserPass | None = None) -> None:
        super().__init__(credentials=credentials)
        self.rejected: dict[str, str] = {}

    def push_update_reference(self, refname: str, message: str | None) -> None:
        if message:
            self.rejected[refname] = message


class PushRejectedError(TransientError):
    """The remote refused the notes ref (someone pushed notes first): fetch, merge, retry."""


class Mirror:
    """A bare pygit2 mirror of one branch of a remote (a path, `file://` or `ssh://` URL)."""

    def __init__(
        self,
        url: str,
        path: Path,
        branch: str = "main",
        *,
        ssh_key: Path | None = None,
        known_hosts: Path | None = None,
        transport: Transport = "auto",
        timeout_s: float = GIT_TIMEOUT_S,
        credential_file: Path | None = None,
        notes_signing_key: Path | None = None,
    ) -> None:
        self.url, self._url_credential = split_userinfo(url)
        self.notes_signing_key = notes_signing_key
        """With signing on, the key every notes commit of the daemon is signed with (source.notes)."""
        """Without credentials: what the remote is configured with and what every message says."""
        self.credential_file = credential_file
        self.path = Path(path)
        self.branch = branch
        self.ssh_key = ssh_key
        self.known_hosts = known_hosts
        self.timeout_s = timeout_s
        self.transport: Literal["libgit2", "git"] = (
            ("git" if is_ssh_url(url) else "libgit2") if transport == "auto" else transport
        )
        self._repo: pygit2.Repository | None = None
        self.lock = threading.RLock()
        """Held by every fetch and push; callers that write refs themselves (notes) take it too."""

    # -- the repository ---------------------------------------------------------

    @property
    def tracking_ref(self) -> str:
        return f"refs/remotes/origin/{self.branch}"

    @property
    def repo(self) -> pygit2.Repository:
        """The bare repository, created with its `origin` remote on first use."""
        if self._repo is None:
            self._repo = self._open()
        return self._repo

    def _open(self) -> pygit2.Repository:
        if (self.path / "HEAD").exists():
            repo = pygit2.Repository(str(self.path))
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            repo = pygit2.init_repository(str(self.path), bare=True, initial_head=self.branch)
        # HEAD names the branch so `lanes history --repo <mirror>` and load_commit(..., "HEAD") work.
        repo.set_head(f"refs/heads/{self.branch}")
        refspec = f"+refs/heads/{self.branch}:{self.tracking_ref}"
        names = repo.remotes.names()
        if "origin" not in names:
            repo.remotes.create("origin", self.url, refspec)
        elif repo.remotes["origin"].url != self.url:
            # The configured URL wins: a changed config must not keep fetching the old remote.
            repo.remotes.set_url("origin", self.url)
        return repo

    def head(self) -> str | None:
        """The fetched head of the branch, or None before the first successful fetch."""
        ref = self.repo.references.get(self.tracking_ref)
        return None if ref is None else str(ref.target)

    # -- fetch -----------------------------------------------------------------

    def fetch(self) -> str:
        """Fetch the branch (forced) and the remote's notes; return the branch head.

        Raises TransientError when the remote cannot be reached or has no such
        branch yet: the daemon keeps the state it has and tries again later.
        """
        with self.lock:
            return self._fetch_branch()

    def _fetch_branch(self) -> str:
        try:
            repo = self.repo
        except (pygit2.GitError, OSError) as exc:
            raise TransientError(f"{self.path}: cannot open the mirror: {exc}") from exc
        specs = [f"+refs/heads/{self.branch}:{self.tracking_ref}", NOTES_FETCH_SPEC]
        self._fetch(specs)
        ref = repo.references.get(self.tracking_ref)
        if ref is None:
            raise TransientError(f"{self.url}: fetch: no branch '{self.branch}' on the remote")
        head = ref.target
        try:
            # A local branch at the same commit keeps HEAD meaningful in the bare mirror.
            repo.references.create(f"refs/heads/{self.branch}", head, force=True)
            foreign = merge_notes(repo, NOTES_TRACKING_REF, NOTES_REF, signing_key=self.notes_signing_key)
        except (pygit2.GitError, OSError) as exc:
            # The mirror's own disk (full, read-only): the fetched head is still known, say why the rest is not.
            raise TransientError(f"{self.path}: cannot update the mirror after fetching {self.url}: {exc}") from exc
        if foreign:
            # The remote's notes tip is not ours (pushed by someone): put the daemon's notes back on top now,
            # not at its next verdict, so a fresh clone reads the daemon's record again.
            try:
                self._push_notes()
            except TransientError as exc:
                log.warning("notes.push_failed", error=str(exc))
        return str(head)

    def _fetch(self, specs: list[str]) -> None:
        if self.transport == "git":
            result = self._git(
                ["fetch", "--no-tags", "--no-write-fetch-head", "origin", *specs], what="fetch", check=False
            )
            if result.returncode != 0:
                if f"couldn't find remote ref refs/heads/{self.branch}" in result.stderr:
                    raise TransientError(f"{self.url}: fetch: no branch '{self.branch}' on the remote")
                raise TransientError(f"{self.url}: fetch failed: {_tail(result.stderr or result.stdout)}")
            return
        try:
            remote = self.repo.remotes["origin"]
            remote.fetch(specs, callbacks=self._callbacks(), prune=pygit2.enums.FetchPrune.NO_PRUNE)
        except (pygit2.GitError, KeyError, OSError) as exc:
            raise TransientError(f"{self.url}: fetch failed: {exc}") from exc

    def fetch_branches(self, prefix: str) -> dict[str, str]:
        """Every remote branch under `prefix` (e.g. `lanes/trials/`) and its head, fetched (forced).

        The tracking refs (`refs/lanes-branches/<prefix>...`) are emptied first, so a branch deleted on
        the remote is gone here too; the commits stay in the object store, so fetching again is cheap.
        """
        if not prefix.endswith("/") or prefix.startswith("/"):
            raise ValueError(f"a branch prefix is a folder of branches, like lanes/trials/: {prefix!r}")
        tracking = f"{BRANCHES_TRACKING_REF}{prefix}"
        with self.lock:
            repo = self.repo
            for name in [r for r in repo.references if r.startswith(tracking)]:
                repo.references.delete(name)
            self._fetch([f"+refs/heads/{prefix}*:{tracking}*"])
            return {
                prefix + name.removeprefix(tracking): str(repo.references[name].target)
                for name in repo.references
                if name.startswith(tracking)
            }

    # -- notes -----------------------------------------------------------------

    def push_notes(self) -> bool:
        """Push refs/notes/lanes; on a rejected push fetch the remote's notes, merge, retry.

        Returns False when there are no notes to push. Raises TransientError
        when the remote is unreachable or keeps refusing after the retries.
        """
        with self.lock:
            return self._push_notes()

    def _push_notes(self) -> bool:
        repo = self.repo
        if repo.references.get(NOTES_REF) is None:
            return False
        last: Exception | None = None
        for _ in range(PUSH_ATTEMPTS + 1):
            try:
                self._push(f"{NOTES_REF}:{NOTES_REF}")
                return True
            except PushRejectedError as exc:
                last = exc
            self._fetch([NOTES_FETCH_SPEC])
            merge_notes(repo, NOTES_TRACKING_REF, NOTES_REF, signing_key=self.notes_signing_key)
        raise TransientError(f"{self.url}: push of {NOTES_REF} still refused after {PUSH_ATTEMPTS} retries: {last}")

    def push_ref(self, local_ref: str, remote_ref: str) -> None:
        """Push one ref (no force); PushRejectedError when the remote moved on, TransientError when down."""
        with self.lock:
            self._push(f"{local_ref}:{remote_ref}")

    def _push(self, spec: str) -> None:
        if self.transport == "git":
            result = self._git(["push", "--porcelain", "origin", spec], what="push", check=False)
            if result.returncode == 0:
                return
            output = (result.stdout + result.stderr).strip()
            if re.search(r"\[rejected\]|non-fast-forward|fetch first|\[remote rejected\]", output):
                raise PushRejectedError(f"{self.url}: push rejected: {_tail(output)}")
            raise TransientError(f"{self.url}: push failed: {_tail(output)}")
        callbacks = _PushCallbacks(self._credentials())
        try:
            self.repo.remotes["origin"].push([spec], callbacks=callbacks)
        except pygit2.GitError as exc:
            text = str(exc)
            # libgit2 says one of these when the remote ref moved on: not an outage, a race.
            if "not present locally" in text or "non-fastforward" in text or "fast-forward" in text:
                raise PushRejectedError(f"{self.url}: push rejected: {text}") from exc
            raise TransientError(f"{self.url}: push failed: {text}") from exc
        if callbacks.rejected:
            reasons = "; ".join(f"{ref}: {why}" for ref, why in callbacks.rejected.items())
            raise PushRejectedError(f"{self.url}: push rejected: {reasons}")

    # -- transports --------------------------------------------------------------

    def _keypair(self) -> pygit2.Keypair | None:
        if self.ssh_key is None:
            return None
        pub = Path(str(self.ssh_key) + ".pub")
        return pygit2.Keypair("git", str(pub) if pub.exists() else None, str(self.ssh_key), "")

    def _credentials(self) -> pygit2.Keypair | pygit2.UserPass | None:
        if not self.url.lower().startswith(("https://", "http://")):
            return self._keypair()
        if not self.url.lower().startswith("https://"):
            return None  # plain http: no credential is ever sent
        found = read_http_credential(self.credential_file) if self.credential_file else self._url_credential
        return pygit2.UserPass(*found) if found else None

    def _callbacks(self) -> pygit2.RemoteCallbacks:
        return pygit2.RemoteCallbacks(credentials=self._credentials())

    def ssh_command(self) -> str:
        """GIT_SSH_COMMAND for OpenSSH: the pinned known_hosts file, no prompt, no trust on first use."""
        argv = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=15"]
        if self.ssh_key is not None:
            argv += ["-i", str(self.ssh_key), "-o", "IdentitiesOnly=yes"]
        if self.known_hosts is not None:
            argv += ["-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null"]
        # git runs GIT_SSH_COMMAND through a shell, so each word is quoted.
        return shlex.join(argv)

    def _git(self, args: list[str], *, what: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        _ = self.repo  # the mirror and its remote must exist before git runs in it
        env = {
            **os.environ,
            "GIT_SSH_COMMAND": self.ssh_command(),
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ASKPASS": "true",
        }
        argv = ["git", "--git-dir", str(self.path), *args]
        try:
            result = subprocess.run(
                argv,
                env=env,
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise TransientError(f"{self.url}: {what} timed out after {self.timeout_s:.0f} s") from exc
        except OSError as exc:
            raise TransientError(f"{self.url}: {what}: cannot run git: {exc}") from exc
        if check and result.returncode != 0:
            raise TransientError(f"{self.url}: {what} failed: {_tail(result.stderr or result.stdout)}")
        return result


def _tail(text: str, lines: int = 5) -> str:
    return " | ".join(text.strip().splitlines()[-lines:]) or "(no output)"
