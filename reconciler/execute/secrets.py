"""Secret values by name, from files on the control node (systemd credentials).

Lanes reference secrets by name only; the value is read here at apply time
and travels to a host on stdin into a 0600 env file, never on a command line
and never into logs, the journal or git.

Lane secrets are a namespace of their own, apart from the daemon's own
credentials (its SSH key, the webhook secret, upstream tokens): a folder and
a file-name prefix. Under systemd both live in $CREDENTIALS_DIRECTORY, and the
unit loads the lane secrets from one folder (`LoadCredential=lane:/etc/lanes/
lane-secrets`), which systemd names `lane_<file>`; so a lane's `hf-token` is
`$CREDENTIALS_DIRECTORY/lane_hf-token` and no lane can name `webhook-secret`.
Every value read is added to the log redactor at once.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from reconciler.errors import PermanentError
from reconciler.logsetup import remember_secrets

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
SYSTEMD_LANE_PREFIX = "lane_"
"""What systemd prefixes to the files of `LoadCredential=lane:<folder>` (the credential id, then `_`)."""


class SecretStore:
    def __init__(
        self, directory: str | Path | None, prefix: str = "", *, forbidden: Iterable[str | Path | None] = ()
    ) -> None:
        env_dir = os.environ.get("CREDENTIALS_DIRECTORY", "").split(":")[0]
        if directory:
            self.directory: Path | None = Path(directory)
            self.prefix = prefix
        elif env_dir:  # under systemd without a setting: the lane namespace of the credentials, never all of it
            self.directory = Path(env_dir)
            self.prefix = prefix or SYSTEMD_LANE_PREFIX
        else:
            self.directory = None
            self.prefix = prefix
        self.forbidden = frozenset(os.path.normpath(os.path.abspath(p)) for p in forbidden if p)
        """The daemon's own credential files: never a lane secret, whatever the folder and prefix say."""

    def path_of(self, name: str) -> Path:
        if not _NAME.match(name) or name in (".", ".."):
            raise PermanentError(f"secret name '{name}' is not a plain name")
        if self.directory is None:
            raise PermanentError(f"secret '{name}' is needed but no secrets directory is configured")
        path = self.directory / f"{self.prefix}{name}"
        if os.path.normpath(os.path.abspath(path)) in self.forbidden:
            raise PermanentError(f"secret '{name}' is one of the daemon's own credentials, which lanes cannot use")
        return path

    def get(self, name: str) -> str:
        path = self.path_of(name)
        try:
            value = path.read_text().rstrip("\n")
        except OSError as exc:
            raise PermanentError(f"secret '{name}' cannot be read from {path}: {exc.strerror}") from None
        remember_secrets([value])
        return value

    def values(self) -> list[str]:
        """Every lane secret value (the files of the lane namespace), for the log redactor."""
        if self.directory is None or not self.directory.is_dir():
            return []
        out = []
        for path in self.directory.iterdir():
            if not path.name.startswith(self.prefix) or not path.is_file():
                continue
            try:
                value = path.read_text().strip()
            except OSError:
                continue
            if value:
                out.append(value)
        return out


def credential_values(files: Iterable[Path | None]) -> list[str]:
    """The values of the daemon's own credential files (webhook secret, tokens), for the log redactor.

    A `user:password` file gives both the whole and the password; an unreadable file gives nothing.
    """
    out = []
    for path in files:
        if path is None:
            continue
        try:
            value = path.read_text().strip()
        except (OSError, UnicodeDecodeError):
            continue
        if not value or value.startswith("-----BEGIN"):  # a private key is never quoted by a log line whole
            continue
        out.append(value)
        _, sep, password = value.partition(":")
        if sep and password and "\n" not in value:
            out.append(password)
    return out


class _Settings(Protocol):
    """What `lane_secrets` and `secret_values` need of the daemon's settings (`DaemonConfig`)."""

    @property
    def daemon(self) -> Any: ...

    @property
    def repo(self) -> Any: ...

    def credential_files(self) -> dict[str, Path | None]: ...


def lane_secrets(config: _Settings) -> SecretStore:
    """The lane secrets of the daemon's settings, with its own credential files out of their reach."""
    return SecretStore(
        config.daemon.secrets_dir, config.daemon.secrets_prefix, forbidden=config.credential_files().values()
    )


def secret_values(config: _Settings) -> list[str]:
    """Every secret value the daemon knows (lane secrets and its own credentials), for the redactor."""
    found = lane_secrets(config).values() + credential_values(config.credential_files().values())
    return found + url_secrets(config.repo.url)


def url_secrets(url: str) -> list[str]:
    """The password (or token) of a `https://user:token@host/...` URL, for the redactor."""
    scheme, sep, rest = url.partition("://")
    authority = rest.partition("/")[0] if sep and scheme.lower() in ("http", "https") else ""
    if "@" not in authority:  # an ssh login name (git@host) is no secret
        return []
    userinfo = authority.rpartition("@")[0]
    user, colon, password = userinfo.partition(":")
    return [v for v in ((password,) if colon else (user,)) if v]


def env_file_text(pairs: list[tuple[str, str]]) -> str:
    """docker --env-file format: one KEY=VALUE per line, no quoting, no newlines in values."""
    lines = []
    for key, value in pairs:
        if "\n" in value or "\r" in value:
            raise PermanentError(f"secret for {key} contains a newline, which an env file cannot carry")
        lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"
