"""The daemon's own sections of its settings file: [repo], [ssh], [daemon], [http] and [hosts.<name>].

Split from `config.py` (which assembles the whole file and loads it); the sections of the jobs are in
`configjobs.py`, those of trials in `trialsettings.py`, notifications in `reconciler.notifications.settings`.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from reconciler.daemon.configpaths import (
    Section,
    base_dir_of,
    env_of,
    expand_path,
    first_dir,
    is_remote_url,
    path_or_none,
)
from reconciler.daemon.http import parse_listen
from reconciler.execute.secrets import SYSTEMD_LANE_PREFIX
from reconciler.spec.base import HostAddress

FALLBACK_STATE_DIR = Path("/var/lib/lanes")
FALLBACK_CONFIG_DIR = Path("/etc/lanes")
SYSTEMD_ENV = {
    "STATE_DIRECTORY": "/var/lib/lanes",
    "CONFIGURATION_DIRECTORY": "/etc/lanes",
    "CREDENTIALS_DIRECTORY": "/run/credentials/lanes-reconciler.service",
}
"""What `systemd/lanes-reconciler.service` sets, for `lanes config check --systemd`."""

LogLevel = Literal["debug", "info", "warning", "error"]


# -- sections ---------------------------------------------------------------------------


class RepoSettings(Section):
    """[repo]: the state repository the daemon converges toward."""

    url: str = Field(
        min_length=1,
        description="the state repository: a local path (a repo on this machine, watched directly) or an "
        "ssh://, https:// or scp-like git@host:team/repo.git URL (mirrored and fetched)",
    )
    branch: str = Field("main", min_length=1, description="the branch whose newest commit is reconciled")
    mirror_dir: Path = Field(
        FALLBACK_STATE_DIR / "mirror",
        description="where the bare pygit2 mirror of a remote repository is kept "
        "(default $STATE_DIRECTORY/mirror, else /var/lib/lanes/mirror)",
    )
    state_dir: str = Field("state", min_length=1, description="folder of the state files inside the repository")
    policies_dir: str = Field("policies", min_length=1, description="folder of the policy files inside the repository")
    fetch_interval_s: float = Field(
        30.0, ge=1.0, le=86400.0, description="seconds between fetches of a remote repository (catches pushes)"
    )
    resync_interval_s: float = Field(
        300.0,
        ge=10.0,
        le=86400.0,
        description="seconds between full resyncs: probe every host and repair drift even when git did not move",
    )
    watch: bool = Field(
        True, description="watch the refs of the local repository or mirror and react within a second of a commit"
    )
    require_signed_commits: Literal["", "ssh", "gpg"] = Field(
        "",
        description='refuse a head commit that is not signed by an allowed signer: "" (off), "ssh" or "gpg"',
    )
    credential_file: Path | None = Field(
        None,
        description="for an https:// url: a file holding the token (user:token, or a token alone) sent as an HTTP "
        "credential to that remote, over https only; never put a token in the url",
    )
    allowed_signers: Path | None = Field(
        None,
        description="who may sign: for ssh an allowed_signers file (ssh-keygen -Y verify format), for gpg an "
        "armored export of the trusted public keys; required when require_signed_commits is set",
    )
    evidence_signers: Path | None = Field(
        None,
        description="an SSH allowed_signers file declaring the daemon's evidence key under the principal "
        "lanes-evidence (only that principal is read from it); with ssh signing the allowed_signers file may "
        "declare it instead; required with gpg signing and [bench] on, since evidence commits are SSH-signed",
    )

    @model_validator(mode="before")
    @classmethod
    def _env_defaults(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and "mirror_dir" not in data:
            state = first_dir(env_of(info), "STATE_DIRECTORY")
            if state is not None:
                data = {**data, "mirror_dir": state / "mirror"}
        return data

    @field_validator("url")
    @classmethod
    def _url(cls, value: str, info: ValidationInfo) -> str:
        if is_remote_url(value):
            return value
        return str(expand_path(value, env_of(info), base_dir_of(info)))

    @field_validator("mirror_dir", mode="before")
    @classmethod
    def _mirror(cls, value: Any, info: ValidationInfo) -> Any:
        return path_or_none(value, info)

    @field_validator("state_dir", "policies_dir")
    @classmethod
    def _inside_repo(cls, value: str) -> str:
        parts = value.strip("/").split("/")
        if value.startswith("/") or ".." in parts:
            raise ValueError("must be a folder inside the repository (relative, no '..')")
        return value.strip("/")

    @field_validator("allowed_signers", "credential_file", "evidence_signers", mode="before")
    @classmethod
    def _signers_path(cls, value: Any, info: ValidationInfo) -> Any:
        return path_or_none(value, info)

    @field_validator("allowed_signers")
    @classmethod
    def _signers_needed(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        mode = info.data.get("require_signed_commits", "")
        if mode and value is None:
            raise ValueError(f'require_signed_commits = "{mode}" needs allowed_signers (a file of trusted signers)')
        return value

    @property
    def is_local(self) -> bool:
        """A repository on this machine: read in place, its refs watched, nothing fetched."""
        return not is_remote_url(self.url)


class SshSettings(Section):
    """[ssh]: how the daemon reaches the Sparks."""

    key: Path = Field(
        Path("~/.ssh/id_ed25519"),
        description="private key for the hosts (default $CREDENTIALS_DIRECTORY/ssh-key under systemd, "
        "else ~/.ssh/id_ed25519); the file is never read by `lanes config check`",
    )
    known_hosts: Path = Field(
        FALLBACK_CONFIG_DIR / "known_hosts",
        description="pinned host keys, no trust on first use "
        "(default $CONFIGURATION_DIRECTORY/known_hosts, else /etc/lanes/known_hosts)",
    )
    concurrency: int = Field(64, ge=1, le=1024, description="at most this many SSH sessions at once")
    connect_timeout_s: float = Field(10.0, gt=0, le=600, description="seconds to connect and authenticate to a host")
    command_timeout_s: float = Field(60.0, gt=0, le=3600, description="seconds for one remote command")
    probe_timeout_s: float = Field(30.0, gt=0, le=600, description="seconds for the one probe per host and cycle")
    stage_parallel: int = Field(
        4, ge=1, le=64, description="rsync processes copying a model's files into one host at once when staging"
    )
    pull_timeout_s: float = Field(
        1800.0, gt=0, le=86400, description="seconds for an image pull (multi-GB engine images on a slow link)"
    )
    origin_roots: tuple[Path, ...] = Field(
        (),
        description="folders of the control node a model's `origin: {path: ...}` may be at or under (none: "
        "no control-node origin is sent); never the folders of the daemon's credentials, journal or mirror",
    )

    @model_validator(mode="before")
    @classmethod
    def _env_defaults(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data
        env = env_of(info)
        creds = first_dir(env, "CREDENTIALS_DIRECTORY")
        conf = first_dir(env, "CONFIGURATION_DIRECTORY")
        if "key" not in data and creds is not None:
            data = {**data, "key": creds / "ssh-key"}
        if "known_hosts" not in data and conf is not None:
            data = {**data, "known_hosts": conf / "known_hosts"}
        return data

    @field_validator("key", "known_hosts", mode="before")
    @classmethod
    def _paths(cls, value: Any, info: ValidationInfo) -> Any:
        return path_or_none(value, info)

    @field_validator("origin_roots", mode="before")
    @classmethod
    def _roots(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, list | tuple):
            return tuple(path_or_none(v, info) for v in value)
        return value

    @field_validator("origin_roots")
    @classmethod
    def _absolute(cls, value: tuple[Path, ...]) -> tuple[Path, ...]:
        for root in value:
            if not root.is_absolute() or root == Path("/"):
                raise ValueError(f"{root} is not an absolute folder below / (an origin root is a folder of models)")
        return value


class DaemonSettings(Section):
    """[daemon]: the daemon itself."""

    owner: str = Field(
        default_factory=lambda: f"lanes@{socket.gethostname()}",
        min_length=1,
        max_length=128,
        description='who holds the host leases, so two reconcilers never act on one host (default "lanes@<hostname>")',
    )
    db: Path = Field(
        FALLBACK_STATE_DIR / "lanes.db",
        description="sqlite journal and status (default $STATE_DIRECTORY/lanes.db, else /var/lib/lanes/lanes.db)",
    )
    secrets_dir: Path | None = Field(
        None,
        description="folder of the lane secrets, files named after the secrets lanes reference "
        "(default $CREDENTIALS_DIRECTORY, the unit's LoadCredential=lane:... files); read at apply time only",
    )
    secrets_prefix: str = Field(
        "",
        pattern=r"^[A-Za-z0-9_.-]*$",
        description='what the file of a lane secret starts with in secrets_dir: "lane_" by default under systemd '
        "(LoadCredential=lane:/etc/lanes/lane-secrets loads each file as lane_<name>), else nothing; the daemon's own "
        "credentials must never be lane secrets",
    )
    drop_caches: bool = Field(
        False, description="drop the page cache on a host before starting ranks (GB10 counts page cache as used)"
    )
    log_level: LogLevel = Field("info", description="debug, info, warning or error (JSON lines to journald)")
    health_interval_s: float = Field(
        120.0,
        ge=1.0,
        le=86400.0,
        description="seconds between asks of each in-sync lane's engine health path, beside the cycles: a lane "
        "whose engine stops answering is degraded within about this long",
    )

    @model_validator(mode="before")
    @classmethod
    def _env_defaults(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data
        env = env_of(info)
        state = first_dir(env, "STATE_DIRECTORY")
        creds = first_dir(env, "CREDENTIALS_DIRECTORY")
        if "db" not in data and state is not None:
            data = {**data, "db": state / "lanes.db"}
        if "secrets_dir" not in data and creds is not None:
            data = {**data, "secrets_dir": creds}
            if "secrets_prefix" not in data:
                data = {**data, "secrets_prefix": SYSTEMD_LANE_PREFIX}
        return data

    @field_validator("db", "secrets_dir", mode="before")
    @classmethod
    def _paths(cls, value: Any, info: ValidationInfo) -> Any:
        return path_or_none(value, info)

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


class HttpSettings(Section):
    """[http]: /healthz, /status, /metrics, the webhook and the dashboard."""

    enabled: bool = Field(True, description="serve the HTTP endpoint at all")
    listen: str = Field(
        "127.0.0.1:9464",
        description='HOST:PORT to bind, "[::1]:9464" for IPv6; loopback by default (put a proxy in front to expose it)',
    )
    webhook_secret_file: Path | None = Field(
        None,
        description="file holding the shared secret of the push webhook (e.g. $CREDENTIALS_DIRECTORY/webhook-secret); "
        "POST /webhook is refused (404) unless it is set; deliveries are HMAC-verified with it",
    )
    dashboard: bool = Field(True, description="serve the dashboard's HTML pages at / and /lanes/<name>")
    dashboard_token_file: Path | None = Field(
        None,
        description="file holding the bearer token the dashboard asks for (Authorization: Bearer ...); required "
        "to serve it when listen is not a loopback address, asked for on loopback too when set",
    )
    control_token_file: Path | None = Field(
        None,
        description="file holding the bearer token of the control API (/control/: status, retry, suspend, resume, "
        "reconcile, wait, logs), e.g. $CREDENTIALS_DIRECTORY/control-token; the API is off unless it is set",
    )
    # Limits that keep a flood of clients from costing the daemon its memory or descriptors.
    max_connections: int = Field(
        64,
        ge=1,
        le=4096,
        description="open HTTP connections at most; at the cap a new one takes the slot of the one waiting "
        "longest for its request head, else it is closed unread",
    )
    head_timeout_s: float = Field(10.0, gt=0, le=300, description="seconds a client has to send its request head")
    body_timeout_s: float = Field(30.0, gt=0, le=600, description="seconds a client has to send a webhook body")
    max_body_bytes: int = Field(
        1 << 20, ge=1024, le=64 << 20, description="largest webhook body accepted (413 above); GET bodies are refused"
    )
    replay_window: int = Field(
        4096,
        ge=16,
        le=1 << 20,
        description="signed deliveries remembered (their IDs and body digests) so a replayed one is refused (409)",
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        parse_listen(value)
        return value

    @field_validator("webhook_secret_file", "dashboard_token_file", "control_token_file", mode="before")
    @classmethod
    def _path(cls, value: Any, info: ValidationInfo) -> Any:
        return path_or_none(value, info)

    @property
    def host_port(self) -> tuple[str, int]:
        return parse_listen(self.listen)


class HostOverrideSettings(Section):
    """[hosts.<name>]: reach a host somewhere else than its state address (a tunnel, a simulated Spark)."""

    address: HostAddress = Field(description="address or name to connect to instead of the state's")
    port: int = Field(22, ge=1, le=65535, description="SSH port to connect to")
    user: str | None = Field(None, min_length=1, description="SSH user instead of the state's (default: the state's)")
