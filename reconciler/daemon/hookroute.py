"""POST /webhook: a signed push to the watched branch schedules a fetch; anything else is answered and dropped.

Kept apart from the service so the checks a request from the internet goes
through (a configured, non-empty secret; the HMAC; not seen before; a
well-formed payload; the event kind; the branch) read top to bottom in one
place.

Replays: the forges sign the body, not the headers, and put no timestamp in
the signature, so a captured delivery verifies forever and its delivery-ID
header can be changed at will. `DeliveryWindow` therefore remembers both the
IDs and the digests of the bodies of the last deliveries whose signature held,
and refuses (409) a delivery that repeats either. A forge's own redelivery
(GitHub's "Redeliver" keeps the ID and the body) is refused the same way: the
interval fetch catches what it would have triggered.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

import structlog

from reconciler.errors import InputError
from reconciler.source.webhook import delivery_of, parse_push, verify_signature

log = structlog.get_logger("lanes.daemon")


class DeliveryWindow:
    """The delivery IDs and body digests of the last `size` signed deliveries, each kept `ttl_s` seconds."""

    def __init__(self, size: int = 4096, ttl_s: float = 7 * 86400.0) -> None:
        self.size = size
        self.ttl_s = ttl_s
        self._seen: OrderedDict[str, float] = OrderedDict()

    def _expire(self, now: float) -> None:
        while self._seen:
            key, at = next(iter(self._seen.items()))
            if now - at < self.ttl_s and len(self._seen) <= 2 * self.size:  # two keys per delivery
                break
            del self._seen[key]

    def first_time(self, delivery: str | None, body: bytes) -> bool:
        """Record this delivery; False when its ID or its body was seen within the window."""
        now = time.monotonic()
        self._expire(now)
        keys = ["body:" + hashlib.sha256(body).hexdigest()]
        if delivery:
            keys.append("id:" + delivery)
        if any(key in self._seen for key in keys):
            return False
        for key in keys:
            self._seen[key] = now
        self._expire(now)
        return True

    def __len__(self) -> int:
        return len(self._seen)


def receive_push(
    secret_file: Path | None,
    branch: str,
    headers: Mapping[str, str],
    body: bytes,
    seen: DeliveryWindow | None = None,
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
    delivery = delivery_of(headers)
    if seen is not None and not seen.first_time(delivery, body):
        log.warning("webhook.replayed", delivery=delivery)
        return 409, "delivery already received", False
    try:
        event = parse_push(headers, body)
    except InputError as exc:
        # Signed by the forge but not a push payload we can read: the sender's mistake, not ours.
        log.warning("webhook.malformed", delivery=delivery, error=str(exc))
        return 400, f"malformed push payload: {exc.message}", False
    if event is None:
        return 202, "ignored: not a push", False
    if event.ref != f"refs/heads/{branch}":
        return 202, f"ignored: {event.ref} is not the watched branch", False
    return 202, "fetch scheduled", True
