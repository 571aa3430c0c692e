"""Finding the running daemon and calling its control API, for every command that steers it.

An operator on the control node should not need to know where the daemon keeps its journal (under
systemd `/var/lib/lanes/lanes.db`, 0700, owned by `lanes`) to ask it something. The daemon is found,
first match wins, from:

1. `--daemon URL` or `LANES_DAEMON=URL`;
2. `--config FILE` or `LANES_CONFIG=FILE`, else `/etc/lanes/reconciler.toml` when it exists: its
   `[http] listen` (a wildcard bind is asked on loopback).

The control token, first match wins: `LANES_DAEMON_TOKEN`, the file `LANES_DAEMON_TOKEN_FILE`, the
config's `[http] control_token_file` when this user can read it (`$CREDENTIALS_DIRECTORY` taken as
systemd sets it for the unit), then `/etc/credstore/lanes.control-token` (the credential's source,
readable by root: `sudo lanes ...`). `--db FILE` still reads a journal copy without any daemon.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from reconciler.daemon.config import DEFAULT_CONFIG, load_config
from reconciler.daemon.configcore import SYSTEMD_ENV
from reconciler.errors import LanesError

CREDSTORE_TOKEN = Path("/etc/credstore/lanes.control-token")
CALL_TIMEOUT_S = 35.0
"""Longer than the daemon's longest hold of one request (a `wait` step of 20 s, a `logs` read of 15 s)."""
MAX_TOKEN = 4096

WHERE = (
    "point at it with --daemon URL (or LANES_DAEMON=http://127.0.0.1:9464) or --config FILE "
    f"(default {DEFAULT_CONFIG}), or read a journal copy with --db FILE "
    "(under systemd: sudo -u lanes lanes ... --db /var/lib/lanes/lanes.db)"
)
"""How to point a command at a daemon or a journal, said whenever neither is found."""


class DaemonCallError(LanesError):
    """The daemon refused the call or did not answer; `status` is its HTTP status (0: no answer)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class DaemonAddress:
    url: str
    token: str | None
    found_by: str
    """How it was found (said in errors, so a wrong guess is visible)."""

    def call(self, command: str, body: dict[str, Any] | None = None, timeout: float = CALL_TIMEOUT_S) -> dict[str, Any]:
        """POST /control/<command>; its JSON answer, or DaemonCallError with the daemon's own reason."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            response = httpx.post(
                f"{self.url}/control/{command}", json=body or {}, headers=headers, timeout=timeout,
                follow_redirects=False,
            )  # fmt: skip
        except httpx.HTTPError as exc:
            raise DaemonCallError(f"the daemon at {self.url} ({self.found_by}) did not answer: {exc}") from None
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            why = f"HTTP {response.status_code}: {response.text[:200].strip()}"
            if response.status_code == 404:
                why += " (a daemon without the control API: an older lanes, or [http] dashboard-only proxy)"
            raise DaemonCallError(f"the daemon at {self.url} answered {why}", response.status_code)
        if response.status_code != 200:
            why = str(data.get("error") or f"HTTP {response.status_code}")
            if response.status_code == 401 and not self.token:
                why += "; no control token found: set LANES_DAEMON_TOKEN or LANES_DAEMON_TOKEN_FILE, or run with sudo"
            raise DaemonCallError(f"the daemon at {self.url} refused: {why}", response.status_code)
        return data


def _url(text: str) -> str:
    base = text.strip().rstrip("/")
    return base if "://" in base else f"http://{base}"


def _read_token(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")[:MAX_TOKEN].strip()
    except OSError:
        return None
    return text or None


def _token(config_token: Path | None) -> str | None:
    env = os.environ.get("LANES_DAEMON_TOKEN", "").strip()
    if env:
        return env
    for path in (os.environ.get("LANES_DAEMON_TOKEN_FILE"), config_token, CREDSTORE_TOKEN):
        if path:
            token = _read_token(Path(path))
            if token:
                return token
    return None


def find_daemon(daemon: str | None, config: Path | None) -> DaemonAddress | None:
    """The daemon to ask, or None when nothing points at one (then the caller says WHERE)."""
    config_path = config or (Path(os.environ["LANES_CONFIG"]) if os.environ.get("LANES_CONFIG") else None)
    token_file: Path | None = None
    settings = None
    if config_path is not None or DEFAULT_CONFIG.is_file():
        path = config_path or DEFAULT_CONFIG
        # The unit's directories as systemd sets them, for paths written with them ($CREDENTIALS_DIRECTORY).
        settings = load_config(path, env={**SYSTEMD_ENV, **os.environ})
        token_file = settings.http.control_token_file
    if daemon:
        return DaemonAddress(_url(daemon), _token(token_file), "--daemon or LANES_DAEMON")
    if settings is None:
        return None
    if not settings.http.enabled:
        raise DaemonCallError(f"{config_path or DEFAULT_CONFIG}: [http] enabled = false: the daemon has no endpoint")
    host, port = settings.http.host_port
    if host in ("0.0.0.0", ""):  # a wildcard bind, asked on loopback
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    shown = f"[{host}]" if ":" in host else host
    where = f"[http] listen of {config_path or DEFAULT_CONFIG}"
    return DaemonAddress(f"http://{shown}:{port}", _token(token_file), where)
