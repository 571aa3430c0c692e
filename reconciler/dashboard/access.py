"""Who may read the dashboard: anyone on loopback, only a bearer of the token when bound elsewhere.

The pages show the fleet's hosts, errors and history; the daemon binds
loopback by default, where the machine's users are the audience. Bound to any
other address, the pages need `Authorization: Bearer <token>` with the token
of `[http] dashboard_token_file` (RFC 6750, section 2.1); without a token file
they are refused there rather than served to the network. A configured token
is asked for on loopback too. The file is read per request, as the webhook's
secret is, so a rotated token needs no reload.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger("lanes.dashboard")
REALM = 'Bearer realm="lanes dashboard"'


@dataclass(frozen=True)
class Refusal:
    status: int
    text: str
    headers: Mapping[str, str]


def refusal(headers: Mapping[str, str], *, loopback: bool, token_file: Path | None) -> Refusal | None:
    """Why this request may not see a page (status, text, headers), or None when it may."""
    if token_file is None:
        if loopback:
            return None
        return Refusal(
            403,
            "the dashboard is served off loopback only with a bearer token: set [http] dashboard_token_file",
            {},
        )
    try:
        token = token_file.read_bytes().strip()
    except OSError as exc:
        log.error("dashboard.token_unreadable", path=str(token_file), error=exc.strerror)
        return Refusal(503, "dashboard token unreadable", {})
    if not token:
        log.error("dashboard.token_empty", path=str(token_file))  # an empty token would let anyone in
        return Refusal(503, "dashboard token is empty", {})
    scheme, _, given = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token):
        return Refusal(401, "a bearer token is required", {"WWW-Authenticate": REALM})
    return None
