"""POST /webhook: a signed push to the watched branch schedules a fetch; anything else is answered and dropped.

Kept apart from the service so the checks a request from the internet goes
through (a configured, non-empty secret; the HMAC; the event kind; the branch)
read top to bottom in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import structlog

from reconciler.source.webhook import parse_push, verify_signature

log = structlog.get_logger("lanes.daemon")


def receive_push(
    secret_file: Path | None, branch: str, headers: Mapping[str, str], body: bytes
) -> tuple[int, str, bool]:
    """(HTTP status, text, whether to fetch now)."""
    if secret_file is None:
        return 404, "webhook not configured", False
    try:
        secret = secret_file.read_bytes().strip()
    except OSError as exc:
        log.error("webhook.secret_unreadable", path=str(secret_file), error=exc.strerror)
        return 503, "webhook secret unreadable", False
    if not secret:
        # An empty key makes every HMAC forgeable: treat it as not configured.
        log.error("webhook.secret_empty", path=str(secret_file))
        return 503, "webhook secret is empty", False
    if not verify_signature(headers, body, secret):
        log.warning("webhook.bad_signature")
        return 401, "bad signature", False
    event = parse_push(headers, body)
    if event is None:
        return 202, "ignored: not a push", False
    if event.ref != f"refs/heads/{branch}":
        return 202, f"ignored: {event.ref} is not the watched branch", False
    return 202, "fetch scheduled", True
