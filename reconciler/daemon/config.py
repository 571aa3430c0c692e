"""The daemon's settings: one TOML file, checked whole before anything runs.

The daemon runs unattended under systemd, so a typo must stop it at start
with the file, line and key named, not surface an hour later as a default
silently used. Every key is documented (`description=`, and
`systemd/reconciler.toml.example` carries the same words); unknown keys are
errors, as in the state files.

Paths may use `~`, `$STATE_DIRECTORY`, `$CREDENTIALS_DIRECTORY` and
`$CONFIGURATION_DIRECTORY` (the directories systemd hands the unit); relative
paths are relative to the config file. Defaults that depend on those
variables are resolved when the file is loaded, from the environment passed
in, so tests and `lanes config check --systemd` can show what the service
will see. Secret files are only ever named here, never read.
"""

from __future__ import annotations

import os
import re
import socket
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, ValidationInfo, field_validator, model_validator

from reconciler.daemon.configpaths import (
    Section,
    base_dir_of,
    env_of,
    expand_path,
    first_dir,
    is_remote_url,
    path_or_none,
    same_path,
)
from reconciler.daemon.http import parse_listen
from reconciler.daemon.tomlpos import TOML_POS, describe_error, line_of
from reconciler.daemon.trialsettings import ExperimentSettings, ForgeSection
from reconciler.errors import InputError
from reconciler.execute.cycle import CycleSettings, HostOverride
from reconciler.execute.secrets import SYSTEMD_LANE_PREFIX
from reconciler.notifications.settings import NotificationSettings, ReceiverSettings
from reconciler.spec.base import NAME_RE
from reconciler.store.retention import Retention
from reconciler.upstream.base import PollSettings, UpstreamCredential

DEFAULT_CONFIG = Path("/etc/lanes/reconciler.toml")
"""Where `lanes daemon` and `lanes config check` look without `--config` (systemd's ConfigurationDirectory)."""

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

    @field_validator("webhook_secret_file", "dashboard_token_file", mode="before")
    @classmethod
    def _path(cls, value: Any, info: ValidationInfo) -> Any:
        return path_or_none(value, info)

    @property
    def host_port(self) -> tuple[str, int]:
        return parse_listen(self.listen)


class HostOverrideSettings(Section):
    """[hosts.<name>]: reach a host somewhere else than its state address (a tunnel, a simulated Spark)."""

    address: str = Field(min_length=1, description="address or name to connect to instead of the state's")
    port: int = Field(22, ge=1, le=65535, description="SSH port to connect to")
    user: str | None = Field(None, min_length=1, description="SSH user instead of the state's (default: the state's)")


_HOST = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?$")


class UpstreamCredentialSettings(Section):
    """[upstream.credentials.<name>]: one of the daemon's tokens and the only hosts it may be sent to."""

    file: Path = Field(
        description="file holding the token, e.g. $CREDENTIALS_DIRECTORY/github-token (a registry's token realm: "
        "user:password); never one of the lane secrets"
    )
    hosts: tuple[str, ...] = Field(
        min_length=1,
        description='hosts (or host:port) the token may go to, over https only: ["api.github.com"], '
        '["registry-1.docker.io", "auth.docker.io"]; a source of upstreams.yaml elsewhere gets no token',
    )

    @field_validator("file", mode="before")
    @classmethod
    def _path(cls, value: Any, info: ValidationInfo) -> Any:
        return path_or_none(value, info)

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for host in value:
            if not _HOST.match(host):
                raise ValueError(f"'{host}' is not a lower-case host name or host:port (no scheme, no path)")
        return value


class UpstreamSettings(Section):
    """[upstream]: polling engine releases and registries for the gap table and proposals."""

    enabled: bool = Field(False, description="poll the sources of state/upstreams.yaml")
    interval_s: float = Field(
        3600.0, ge=60.0, le=604800.0, description="seconds between polls (conditional requests; rate limits honoured)"
    )
    credentials: dict[str, UpstreamCredentialSettings] = Field(
        default_factory=dict,
        description="the daemon's upstream tokens by name, each with the hosts it may be sent to; upstreams.yaml "
        "may only pick one of these (token_credential), never a file or a host",
    )
    allow_insecure_hosts: tuple[str, ...] = Field(
        (),
        description="hosts (host or host:port) a token may reach over plain http: test servers on loopback only",
    )

    @field_validator("credentials")
    @classmethod
    def _names(cls, value: dict[str, UpstreamCredentialSettings]) -> dict[str, UpstreamCredentialSettings]:
        for name in value:
            if not re.match(r"^[A-Za-z0-9_.-]+$", name):
                raise ValueError(f"credential name '{name}' is not a plain name (letters, digits, . _ -)")
        return value

    @field_validator("allow_insecure_hosts")
    @classmethod
    def _insecure(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for host in value:
            name = host.rsplit(":", 1)[0] if ":" in host and not host.startswith("[") else host
            if name not in ("localhost", "127.0.0.1", "::1", "[::1]"):
                raise ValueError(f"'{host}' is not a loopback host; only loopback test servers may be plain http")
        return value


class BenchSettings(Section):
    """[bench]: benchmark a lane after it changes and commit the evidence."""

    enabled: bool = Field(False, description="benchmark each lane after a change and commit evidence/<lane>/...json")
    signing_key: Path | None = Field(
        None,
        description="the SSH private key that signs evidence commits when signed commits are required (declared "
        "as lanes-evidence in the signers); default ssh.key",
    )

    @field_validator("signing_key", mode="before")
    @classmethod
    def _key_path(cls, value: Any, info: ValidationInfo) -> Any:
        return path_or_none(value, info)


class RetentionSettings(Section):
    """[retention]: how long the journal keeps its rows; pruned at start and then every `prune_interval_s`."""

    journal_days: float = Field(
        30.0, ge=0, description="days the journal keeps step records (0: forever); steps in flight always stay"
    )
    applies_days: float = Field(
        180.0,
        ge=0,
        description="days the applies table keeps what each transaction did (0: forever); each lane's newest "
        "and last healthy apply, and those of the commits it runs, always stay",
    )
    commits_days: float = Field(
        180.0,
        ge=0,
        description="days the daemon's commit decisions are kept (0: forever); the commits the lanes run, "
        "want or ran healthy, the trusted head and the newest decision always stay",
    )
    prune_interval_s: float = Field(
        86400.0, ge=60, le=30 * 86400, description="seconds between prunes after the one at start (a day)"
    )

    def policy(self) -> Retention:
        return Retention(journal_days=self.journal_days, applies_days=self.applies_days, commits_days=self.commits_days)


class DaemonConfig(Section):
    """The whole file. Build it with `load_config` (or `parse_config` for text)."""

    repo: RepoSettings = Field(description="the state repository")
    ssh: SshSettings = Field(description="reaching the hosts")
    daemon: DaemonSettings = Field(description="the daemon itself")
    http: HttpSettings = Field(description="the HTTP endpoint")
    hosts: dict[str, HostOverrideSettings] = Field(
        default_factory=dict, description="per-host connection overrides, keyed by host name"
    )
    upstream: UpstreamSettings = Field(description="upstream release polling")
    bench: BenchSettings = Field(description="benchmarks after a change")
    retention: RetentionSettings = Field(description="how long the journal keeps its rows")
    notifications: NotificationSettings = Field(
        default_factory=NotificationSettings, description="chat and webhook receivers told what happens"
    )
    forge: ForgeSection = Field(description="the forge of the state repository's pull requests")
    experiments: ExperimentSettings = Field(description="trial branches tried on spare hosts")

    @model_validator(mode="before")
    @classmethod
    def _sections(cls, data: Any) -> Any:
        # Missing sections are validated as {} so their env-dependent defaults see the context.
        if isinstance(data, dict):
            data = dict(data)
            for name in ("ssh", "daemon", "http", "upstream", "bench", "retention", "forge", "experiments"):
                data.setdefault(name, {})
        return data

    @field_validator("hosts")
    @classmethod
    def _host_names(cls, value: dict[str, HostOverrideSettings]) -> dict[str, HostOverrideSettings]:
        for name in value:
            if not NAME_RE.match(name):
                raise ValueError(f"host name '{name}' is not a valid host name (lower-case letters, digits, . _ -)")
        return value

    @model_validator(mode="after")
    def _evidence_verifiable(self) -> DaemonConfig:
        """Evidence commits are SSH-signed: with gpg signing, the daemon must know its evidence key to accept them."""
        if self.bench.enabled and self.repo.require_signed_commits == "gpg" and self.repo.evidence_signers is None:
            raise ValueError(
                'require_signed_commits = "gpg" with [bench] enabled needs repo.evidence_signers: an SSH '
                "allowed_signers file naming the daemon's evidence key as lanes-evidence (its evidence commits are "
                "SSH-signed; without it every evidence commit would be refused)"
            )
        return self

    def evidence_key(self) -> Path:
        """The key that signs evidence commits."""
        return self.bench.signing_key or self.ssh.key

    @model_validator(mode="after")
    def _credentials_apart(self) -> DaemonConfig:
        """No daemon credential may sit where a lane secret is read: a lane could name it otherwise."""
        lane_dir, prefix = self.daemon.secrets_dir, self.daemon.secrets_prefix
        if lane_dir is None:
            return self
        for key, path in self.credential_files().items():
            if path is not None and same_path(path.parent, lane_dir) and path.name.startswith(prefix):
                raise ValueError(
                    f"{key} ({path}) is in the lane secrets (daemon.secrets_dir {lane_dir}"
                    f"{f', prefix {prefix!r}' if prefix else ''}), so a lane could name it; keep the daemon's "
                    'credentials apart (under systemd: secrets_prefix = "lane_" and LoadCredential=lane:<folder>)'
                )
        return self

    def overrides(self) -> dict[str, HostOverride]:
        return {n: HostOverride(address=h.address, port=h.port, user=h.user) for n, h in self.hosts.items()}

    def cycle_settings(self) -> CycleSettings:
        return CycleSettings(
            owner=self.daemon.owner,
            probe_timeout_s=self.ssh.probe_timeout_s,
            command_timeout_s=self.ssh.command_timeout_s,
            pull_timeout_s=self.ssh.pull_timeout_s,
            concurrency=self.ssh.concurrency,
            drop_caches=self.daemon.drop_caches,
            overrides=self.overrides(),
            ssh_key=self.ssh.key,
            known_hosts=self.ssh.known_hosts,
            stage_parallel=self.ssh.stage_parallel,
        )

    def secret_paths(self) -> dict[str, Path | None]:
        """Files and folders that hold secrets: shown by `config check`, never read by it."""
        return {
            "ssh.key": self.ssh.key,
            "bench.signing_key": self.bench.signing_key,
            "daemon.secrets_dir": self.daemon.secrets_dir,
            "http.webhook_secret_file": self.http.webhook_secret_file,
            "http.dashboard_token_file": self.http.dashboard_token_file,
            "repo.credential_file": self.repo.credential_file,
            **{f"upstream.credentials.{n}.file": c.file for n, c in self.upstream.credentials.items()},
            **self.notifications.credential_files(),
        }

    def credential_files(self) -> dict[str, Path | None]:
        """The daemon's own credentials (never lane secrets): SSH key, webhook secret, upstream tokens."""
        return {k: v for k, v in self.secret_paths().items() if k != "daemon.secrets_dir"}

    def poll_settings(self) -> PollSettings:
        """What the upstream pollers get: the declared tokens with their hosts, never the lane secrets."""
        return PollSettings(
            data_dir=Path(self.repo.mirror_dir).parent / "upstream",
            credentials=tuple(
                UpstreamCredential(name=n, file=c.file, hosts=c.hosts) for n, c in self.upstream.credentials.items()
            ),
            allow_insecure_hosts=self.upstream.allow_insecure_hosts,
        )


# -- loading ----------------------------------------------------------------------------

_SECTIONS: dict[str, type[BaseModel]] = {
    "repo": RepoSettings,
    "ssh": SshSettings,
    "daemon": DaemonSettings,
    "http": HttpSettings,
    "upstream": UpstreamSettings,
    "bench": BenchSettings,
    "notifications": NotificationSettings,
    "forge": ForgeSection,
    "experiments": ExperimentSettings,
}


def _fields_at(loc: tuple[str | int, ...]) -> Mapping[str, Any] | None:
    """The keys allowed in the table that holds `loc`'s last element, for 'unknown key' messages."""
    parent = loc[:-1]
    if not parent:
        return DaemonConfig.model_fields
    if len(parent) == 1 and str(parent[0]) in _SECTIONS:
        return _SECTIONS[str(parent[0])].model_fields
    if len(parent) == 2 and parent[0] == "hosts":
        return HostOverrideSettings.model_fields
    if len(parent) == 3 and parent[:2] == ("upstream", "credentials"):
        return UpstreamCredentialSettings.model_fields
    if len(parent) == 3 and parent[:2] == ("notifications", "receivers"):
        return ReceiverSettings.model_fields
    return None


def parse_config(
    text: str,
    *,
    file: str | Path = "<config>",
    env: Mapping[str, str] | None = None,
    base_dir: Path | None = None,
) -> DaemonConfig:
    """Validate TOML text; `InputError` names the file, line and dotted key of the first problem."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        pos = TOML_POS.search(message)
        line = int(pos.group(1)) if pos else None
        raise InputError(f"not valid TOML: {TOML_POS.sub('', message)}", file=str(file), line=line) from None
    context = {"env": os.environ if env is None else env, "base_dir": base_dir}
    try:
        return DaemonConfig.model_validate(raw, context=context)
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False):
            loc = tuple(error["loc"])
            field = ".".join(str(p) for p in loc) or None
            problems.append(
                InputError(describe_error(error, _fields_at(loc)), file=str(file), line=line_of(text, loc), field=field)
            )
        raise ConfigError(problems) from None


class ConfigError(InputError):
    """Every problem of a settings file (`lanes config check` lists them); the first one is the message."""

    def __init__(self, problems: list[InputError]) -> None:
        first, more = problems[0], len(problems) - 1
        message = first.message + (f" (and {more} more problem{'s' if more > 1 else ''})" if more else "")
        super().__init__(message, file=first.file, line=first.line, field=first.field)
        self.problems = tuple(problems)


def load_config(path: str | Path = DEFAULT_CONFIG, *, env: Mapping[str, str] | None = None) -> DaemonConfig:
    """Read and validate the daemon's TOML file (relative paths inside it are relative to its folder)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("config file not found (see systemd/reconciler.toml.example)", file=str(file)) from None
    except UnicodeDecodeError:
        raise InputError("config file is not UTF-8 text", file=str(file)) from None
    except OSError as exc:
        raise InputError(f"config file cannot be read: {exc.strerror}", file=str(file)) from None
    return parse_config(text, file=file, env=env, base_dir=file.resolve().parent)
