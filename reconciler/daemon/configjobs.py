"""The sections of the daemon's jobs: [upstream] (and its tokens), [bench], [retention].

Split from `config.py`, which assembles the whole settings file and loads it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationInfo, field_validator

from reconciler.daemon.configpaths import (
    Section,
    path_or_none,
)
from reconciler.store.retention import Retention

_HOST = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?$")
"""A host a token may be sent to: a lower-case name, optionally with a port."""


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
