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

The sections live in modules of their own (`configcore`: repo, ssh, daemon, http, host overrides;
`configjobs`: upstream, bench, retention; `trialsettings`: forge, experiments; notifications in
`reconciler.notifications.settings`); this module assembles the file and loads it.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from reconciler.daemon.configcore import (
    SYSTEMD_ENV,
    DaemonSettings,
    HostOverrideSettings,
    HttpSettings,
    RepoSettings,
    SshSettings,
)
from reconciler.daemon.configgateway import GatewaySettings
from reconciler.daemon.configjobs import BenchSettings, RetentionSettings, UpstreamCredentialSettings, UpstreamSettings
from reconciler.daemon.configpaths import (
    Section,
    same_path,
)
from reconciler.daemon.tomlpos import TOML_POS, describe_error, line_of
from reconciler.daemon.trialsettings import ExperimentSettings, ForgeSection
from reconciler.errors import InputError
from reconciler.execute.cycle import CycleSettings, HostOverride
from reconciler.execute.localorigin import LocalOrigins, forbidden_dirs
from reconciler.notifications.settings import NotificationSettings, ReceiverSettings
from reconciler.spec.base import NAME_RE
from reconciler.upstream.base import PollSettings, UpstreamCredential

__all__ = [
    "DEFAULT_CONFIG",
    "SYSTEMD_ENV",
    "BenchSettings",
    "ConfigError",
    "DaemonConfig",
    "DaemonSettings",
    "HostOverrideSettings",
    "HttpSettings",
    "RepoSettings",
    "RetentionSettings",
    "SshSettings",
    "UpstreamCredentialSettings",
    "UpstreamSettings",
    "load_config",
    "parse_config",
]
"""The settings file's whole model and loader; the sections' classes are re-exported from their modules."""

DEFAULT_CONFIG = Path("/etc/lanes/reconciler.toml")
"""Where `lanes daemon` and `lanes config check` look without `--config` (systemd's ConfigurationDirectory)."""


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
    gateway: GatewaySettings = Field(description="the gateway's routes to the lanes that serve")

    @model_validator(mode="before")
    @classmethod
    def _sections(cls, data: Any) -> Any:
        # Missing sections are validated as {} so their env-dependent defaults see the context.
        if isinstance(data, dict):
            data = dict(data)
            for name in ("ssh", "daemon", "http", "upstream", "bench", "retention", "forge", "experiments", "gateway"):
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

    @model_validator(mode="after")
    def _origin_roots_apart(self) -> DaemonConfig:
        """An origin root may hold models only: none of the daemon's credentials or state inside or above it."""
        for root in self.ssh.origin_roots:
            real = Path(os.path.realpath(root))
            for kept in self.kept_from_origins():
                kept_real = Path(os.path.realpath(kept))
                if real == kept_real or real in kept_real.parents or kept_real in real.parents:
                    raise ValueError(
                        f"ssh.origin_roots: {root} and {kept} overlap: a model origin under it could send the "
                        "daemon's credentials or state to a Spark"
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
            origins=LocalOrigins(self.ssh.origin_roots, self.kept_from_origins()),
            # Facts a resync left are at most one interval old, unless a host stopped answering (then forgotten).
            reaction_max_age_s=self.repo.resync_interval_s + self.ssh.probe_timeout_s,
            health_interval_s=self.daemon.health_interval_s,
        )

    def kept_from_origins(self) -> tuple[Path, ...]:
        """The folders no origin may contain or lie in: every credential's, the journal's, the mirror's."""
        folders = [self.daemon.secrets_dir, self.repo.mirror_dir]
        files = [p for p in self.secret_paths().values() if p not in folders]
        return forbidden_dirs([*files, self.ssh.known_hosts, self.daemon.db], folders)

    def secret_paths(self) -> dict[str, Path | None]:
        """Files and folders that hold secrets: shown by `config check`, never read by it."""
        return {
            "ssh.key": self.ssh.key,
            "bench.signing_key": self.bench.signing_key,
            "daemon.secrets_dir": self.daemon.secrets_dir,
            "http.webhook_secret_file": self.http.webhook_secret_file,
            "http.dashboard_token_file": self.http.dashboard_token_file,
            "http.control_token_file": self.http.control_token_file,
            "gateway.key_file": self.gateway.key_file,
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
    "gateway": GatewaySettings,
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
