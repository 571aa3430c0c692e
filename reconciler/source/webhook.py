"""Push webhooks from GitHub, Gitea and Forgejo: is the request genuine, and what was pushed.

A webhook only makes the daemon fetch sooner; the fetched commit is still
what gets reconciled, so a forged payload can at worst cause a fetch. Even so
an unsigned or wrongly signed request is refused before its body is parsed.

Signatures are HMAC-SHA256 of the raw body under the hook's secret:
GitHub sends `X-Hub-Signature-256: sha256=<hex>`, Gitea `X-Gitea-Signature:
<hex>`, Forgejo `X-Forgejo-Signature: <hex>` (Forgejo and newer Gitea send
several of these at once). Every signature header present must verify; a
bad one is not rescued by a good one next to it.

Each delivery carries an ID: GitHub `X-GitHub-Delivery` (docs.github.com,
webhooks/webhook-events-and-payloads#delivery-headers), Gitea
`X-Gitea-Delivery` and, for compatibility, `X-Gogs-Delivery` and
`X-GitHub-Delivery` (docs.gitea.com/features/webhooks), Forgejo
`X-Forgejo-Delivery` next to those three
(forgejo.org/docs/latest/user/webhooks). The HMAC covers the body only, not
these headers: a replay can carry a fresh ID, so a replay check must key on
the signed body as well (see `reconciler.daemon.hookroute`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from reconciler.errors import InputError

ZERO_SHA = "0" * 40

_SIGNATURE_HEADERS = {
    "x-hub-signature-256": "sha256=",
    "x-gitea-signature": "",
    "x-forgejo-signature": "",
}
# Forgejo and Gitea also send X-GitHub-Event for compatibility, so the forge's own header is asked first.
_EVENT_HEADERS = (
    ("x-forgejo-event", "forgejo"),
    ("x-gitea-event", "gitea"),
    ("x-gogs-event", "gogs"),
    ("x-github-event", "github"),
)


@dataclass(frozen=True)
class PushEvent:
    """What a push webhook says: which ref moved, to which commit, in which repo, by whom."""

    ref: str
    after: str
    repo_url: str
    pusher: str
    before: str = ZERO_SHA
    forge: str = "github"
    delivery: str | None = None

    @property
    def branch(self) -> str | None:
        return self.ref.removeprefix("refs/heads/") if self.ref.startswith("refs/heads/") else None

    @property
    def deleted(self) -> bool:
        return self.after == ZERO_SHA


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def sign(body: bytes, secret: bytes) -> str:
    """The hex HMAC-SHA256 a forge sends for `body` (tests and `curl` examples use it)."""
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify_signature(headers: Mapping[str, str], body: bytes, secret: bytes) -> bool:
    """True when at least one known signature header is present and every one present matches."""
    if not secret:
        return False  # an empty secret would make every signature trivially forgeable
    lowered = _lower(headers)
    expected = sign(body, secret)
    seen = False
    for name, prefix in _SIGNATURE_HEADERS.items():
        value = lowered.get(name)
        if value is None:
            continue
        seen = True
        value = value.strip()
        if prefix:
            if not value.lower().startswith(prefix):
                return False
            value = value[len(prefix) :]
        # compare_digest takes the same time wherever the first differing byte is.
        if not hmac.compare_digest(value.lower().encode("ascii", "replace"), expected.encode("ascii")):
            return False
    return seen


def event_of(headers: Mapping[str, str]) -> tuple[str, str] | None:
    """(event name, forge) from the event headers, or None when no forge header is present."""
    lowered = _lower(headers)
    for name, forge in _EVENT_HEADERS:
        if name in lowered:
            return lowered[name].strip().lower(), forge
    return None


def _payload(headers: Mapping[str, str], body: bytes) -> Any:
    content_type = _lower(headers).get("content-type", "application/json").lower()
    try:
        text = body.decode("utf-8")
        if content_type.startswith("application/x-www-form-urlencoded"):
            # GitHub's "form" content type puts the JSON in a `payload` field.
            text = parse_qs(text).get("payload", [""])[0]
        return json.loads(text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"webhook body is not a JSON push payload: {exc}", field="body") from None


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


_DELIVERY_HEADERS = ("x-forgejo-delivery", "x-gitea-delivery", "x-gogs-delivery", "x-github-delivery")


def delivery_of(headers: Mapping[str, str]) -> str | None:
    """The forge's ID of this delivery (the forge's own header first), or None when it sends none."""
    lowered = _lower(headers)
    return next((lowered[h].strip() for h in _DELIVERY_HEADERS if lowered.get(h, "").strip()), None)


def parse_push(headers: Mapping[str, str], body: bytes) -> PushEvent | None:
    """The push a webhook reports; None for other events (ping, pull_request, ...).

    Raises InputError for a push event whose body lacks `ref` or `after`: the
    HTTP layer answers 400. Verify the signature first.
    """
    found = event_of(headers)
    if found is None or found[0] != "push":
        return None
    _, forge = found
    data = _payload(headers, body)
    if not isinstance(data, dict):
        raise InputError("webhook push payload is not a JSON object", field="body")
    ref, after = _text(data.get("ref")), _text(data.get("after"))
    if not ref or not after:
        raise InputError("webhook push payload lacks 'ref' or 'after'", field="body")
    repo = _obj(data.get("repository"))
    repo_url = _text(repo.get("clone_url")) or _text(repo.get("ssh_url")) or _text(repo.get("html_url"))
    pusher_data = _obj(data.get("pusher"))
    # GitHub names the pusher `name`; Gitea and Forgejo send a user with `login`/`username`.
    pusher = (
        _text(pusher_data.get("login"))
        or _text(pusher_data.get("username"))
        or _text(pusher_data.get("name"))
        or _text(pusher_data.get("email"))
    )
    return PushEvent(
        ref=ref,
        after=after,
        repo_url=repo_url,
        pusher=pusher,
        before=_text(data.get("before")) or ZERO_SHA,
        forge=forge,
        delivery=delivery_of(headers),
    )
