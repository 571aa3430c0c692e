"""One message to one receiver, through Apprise, in a worker thread.

Apprise (https://github.com/caronc/apprise) speaks each service's webhook
and API; it is synchronous (requests), so a send runs in a thread of its own
(`reconciler.notifications.dispatch.in_thread`), never on the daemon's loop
or its default executor. Apprise is imported on the first send: a daemon
without receivers never loads it.

Gitea and Forgejo have no Apprise plugin (apprise 2.3.0 has none); a comment
on an issue is what they take (POST /api/v1/repos/{owner}/{repo}/issues/
{index}/comments with {"body": ...} and `Authorization: token ...`, Gitea's
routers/api/v1/repo/issue_comment.go, which Forgejo keeps), so a gitea:// URL
becomes Apprise's JSON webhook (plugins/custom_json.py) with the payload keys
renamed (`:message=body`), the others dropped (`:title=` ...) and the header
added (`+Authorization=...`).
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import quote

from reconciler.logsetup import redact, remember_secrets
from reconciler.notifications.settings import PLACEHOLDER, ReceiverSettings

_GITEA = {"gitea": "json", "giteas": "jsons", "forgejo": "json", "forgejos": "jsons"}
_LOCK = threading.Lock()


class ReceiverError(Exception):
    """A receiver that could not be given the message (not answering, refusing, misconfigured)."""


def read_secret(path: Path) -> str:
    try:
        value = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ReceiverError(f"its credential file cannot be read ({type(exc).__name__})") from None
    if not value:
        raise ReceiverError("its credential file is empty")
    remember_secrets(secret_parts(value))
    return value


def secret_parts(value: str) -> list[str]:
    """The value, its URL-quoted form and its pieces (a Slack TokenA/TokenB/TokenC), for the redactor."""
    parts = [value, quote(value, safe="/"), quote(value, safe="")]
    parts += [p for p in value.replace(":", "/").split("/") if len(p) >= 6]
    return parts


def apprise_url(settings: ReceiverSettings, secret: str | None) -> tuple[str, bool]:
    """The Apprise URL to send to, and whether the title must be folded into the body (no title field)."""
    url = settings.url
    if PLACEHOLDER in url:
        if secret is None:
            raise ReceiverError("its url needs the credential file's value")
        url = url.replace(PLACEHOLDER, quote(secret, safe="/"))
    scheme, _, rest = url.partition("://")
    target = _GITEA.get(scheme.lower())
    if target is None:
        return url, False
    # gitea://[token@]host[:port]/owner/repo/index  ->  the comments endpoint
    authority, _, path = rest.partition("/")
    token, at, host = authority.rpartition("@")
    parts = [p for p in path.split("?")[0].split("/") if p]
    if len(parts) != 3 or not parts[2].isdigit():
        raise ReceiverError("a gitea/forgejo url is gitea://host/owner/repo/<issue number>")
    owner, repo, index = parts
    query = [":message=body", ":title=", ":version=", ":type=", ":attachments="]
    if at:
        query.append("+Authorization=" + quote(f"token {token}", safe=""))
    comments = f"{host}/api/v1/repos/{owner}/{repo}/issues/{index}/comments"
    return f"{target}://{comments}?{'&'.join(query)}", True


def send(settings: ReceiverSettings, title: str, body: str, severity: str, timeout_s: float) -> None:
    """Deliver one message, or raise ReceiverError; runs in a worker thread."""
    secret = read_secret(settings.credential_file) if settings.credential_file is not None else None
    url, fold = apprise_url(settings, secret)
    # Whatever the message says passes the redactor last: error texts may quote a secret.
    title, body = redact(title), redact(body)
    if fold:
        title, body = "", f"**{title}**\n\n{body}"
    url += ("&" if "?" in url else "?") + f"cto={timeout_s:g}&rto={timeout_s:g}"
    apobj = _apprise(url)
    import apprise

    result = apobj.notify(title=title, body=body, notify_type=apprise.NotifyType(severity), body_format="text")
    if not result:
        raise ReceiverError(_why(result))


def _why(result: Any) -> str:
    """What Apprise logged about the failed send (apprise 2.x: result.results[].attempts[].logs[])."""
    try:
        for notified in reversed(result.results):
            for attempt in reversed(notified.attempts):
                for entry in reversed(list(attempt.logs)):
                    if str(entry.level).upper() in {"WARNING", "ERROR", "CRITICAL"}:
                        return str(entry.message)
    except (AttributeError, TypeError):  # a result of another shape: the plain reason below
        pass
    return "it did not accept the message"


def _apprise(url: str) -> Any:
    # Apprise loads every plugin module on its first URL, one of which imports the stdlib's imghdr
    # (apprise/utils/pgp.py), deprecated since Python 3.11: that warning is Apprise's, not ours.
    # The lock: two threads must not load the plugins at once, nor change the warning filters together.
    with _LOCK, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="'imghdr' is deprecated", category=DeprecationWarning)
        import apprise

        # Memory only: Apprise's persistent store (Matrix logins, room ids) would otherwise want a folder.
        # In this thread: by default Apprise 2.x runs every send in one process-wide pool of cpu+4 threads
        # under a 60 s service timeout (apprise/apprise.py get_shared_executor, _notify_sequential), so six
        # hanging receivers on a 2-core host starved every other one, and its pool's threads hold up the
        # exit; async_mode=False with no service timeout sends in the calling thread (the dispatcher's,
        # one per send), bounded by the cto/rto timeouts of the URL.
        asset = apprise.AppriseAsset(
            storage_mode=apprise.PersistentStoreMode.MEMORY, async_mode=False, service_timeout=0
        )
        apobj = apprise.Apprise(asset=asset)
        if not apobj.add(url):
            raise ReceiverError("Apprise does not understand its url")
    return apobj
