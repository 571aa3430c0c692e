"""[gateway]: the daemon keeps the gateway's routes (`gateway:` in state/fleet.yaml) to the lanes that serve.

Where the daemon reaches the gateway's control plane, and with which key, is the operator's (this file),
never the state's: a commit names which models are served and by which lanes, but it cannot send the
gateway's admin key to an address of its choosing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator, model_validator

from reconciler.daemon.configpaths import Section, env_of, first_dir, path_or_none

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class GatewaySettings(Section):
    """[gateway]: register and remove the gateway's workers as lanes pass their gates or stop serving."""

    enabled: bool = Field(False, description="keep the gateway's routes (off: the gateway is never called)")
    url: str = Field(
        "http://127.0.0.1:30000",
        description="the gateway's control plane (SMG's /workers API, on its serving port); plain http only on "
        "loopback, since the admin key travels with every call",
    )
    key_file: Path | None = Field(
        None,
        description="file holding the gateway's admin key (default $CREDENTIALS_DIRECTORY/gateway-key); the same "
        "key lanes-gateway.service loads",
    )
    interval_s: float = Field(
        60.0,
        ge=1,
        le=3600,
        description="seconds between routes passes when nothing changed: a restarted gateway has forgotten every "
        "worker, and this is how soon they are back",
    )
    timeout_s: float = Field(60.0, gt=0, le=600, description="seconds one routes pass may take, all calls included")
    metrics_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="the gateway's Prometheus port on the control plane's host, which drains and watch windows "
        "read (default: the state's gateway.metrics_port)",
    )
    hold_host: str = Field(
        "127.0.0.1",
        description="where the holding answer listens (503 with Retry-After for a model changed in place); the "
        "gateway calls it, on this machine",
    )
    hold_port: int = Field(0, ge=0, le=65535, description="the holding answer's port (0: any free port)")

    @field_validator("hold_host")
    @classmethod
    def _hold_loopback(cls, value: str) -> str:
        if value not in _LOOPBACK:
            raise ValueError(f"{value!r}: the holding answer listens on loopback only (the gateway is on this machine)")
        return value

    @model_validator(mode="before")
    @classmethod
    def _env_defaults(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and "key_file" not in data:
            creds = first_dir(env_of(info), "CREDENTIALS_DIRECTORY")
            if creds is not None:
                data = {**data, "key_file": creds / "gateway-key"}
        return data

    @field_validator("key_file", mode="before")
    @classmethod
    def _path(cls, value: Any, info: ValidationInfo) -> Any:
        return path_or_none(value, info)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value!r} is not an http(s) URL with a host")
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ValueError(f"{value!r}: no user, password, query or fragment (the key goes in a header)")
        if parts.scheme == "http" and parts.hostname not in _LOOPBACK:
            raise ValueError(f"{value!r}: plain http only to loopback; the gateway's admin key travels with each call")
        return value

    @model_validator(mode="after")
    def _key_when_enabled(self) -> GatewaySettings:
        if self.enabled and self.key_file is None:
            raise ValueError("key_file: required when enabled (or run under systemd with a gateway-key credential)")
        return self
