"""One message through real Apprise to local receivers that answer as each service does.

ntfy, Matrix, JSON webhooks and the Gitea/Forgejo comment take a host in
their URL, so they are pointed at 127.0.0.1. Slack's and Discord's webhook
hosts are fixed in Apprise (apprise 2.3.0: `NotifySlack.webhook_url`,
`NotifyDiscord.notify_url`, class attributes, no URL option); here those two
attributes are pointed at the local receiver for the test, so Apprise's own
Slack and Discord code builds and sends the payload to a receiver that
answers "ok" and 204 as the services do.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from apprise.plugins.discord import NotifyDiscord
from apprise.plugins.slack import NotifySlack

from reconciler.logsetup import forget_secrets, redact, remember_secrets
from reconciler.notifications.receivers import ReceiverError, apprise_url, send
from reconciler.notifications.settings import ReceiverSettings
from tests.support.receivers import MATRIX_ROOM, Receivers

pytestmark = pytest.mark.timeout(60)

TOKEN = "tok_0123456789abcdef0123"
SLACK = "T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7"  # the shape of Apprise's own example (plugins/slack.py)
DISCORD = "4174216298/JHMHI8qBe7bk2ZwO5U711o3dV_js"


@pytest.fixture
def receivers() -> Iterator[Receivers]:
    r = Receivers(TOKEN)
    yield r
    r.close()


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name, value in {"token": TOKEN, "slack": SLACK, "discord": DISCORD}.items():
        out[name] = tmp_path / name
        out[name].write_text(value + "\n")
    return out


def deliver(url: str, credential_file: Path | None = None, body: str = "body line") -> None:
    send(ReceiverSettings(url=url, credential_file=credential_file), "lanes: the title", body, "failure", 5.0)


def test_ntfy_json_matrix_and_gitea_on_loopback(receivers: Receivers, files: dict[str, Path]) -> None:
    hp = receivers.hostport
    deliver(f"ntfy://{hp}/lanes?token={{secret}}", files["token"])
    deliver(f"json://{hp}/hook/lanes")
    deliver(f"matrix://{{secret}}@{hp}/#ops:localhost", files["token"])
    deliver(f"gitea://{{secret}}@{hp}/team/ops/12", files["token"])
    deliver(f"forgejo://{{secret}}@{hp}/team/ops/13", files["token"])

    (ntfy,) = receivers.of("ntfy")
    assert ntfy.json()["topic"] == "lanes" and ntfy.json()["title"] == "lanes: the title"
    assert ntfy.headers["authorization"] == f"Bearer {TOKEN}"
    (hook,) = receivers.of("json")
    assert hook.path == "/hook/lanes" and hook.json()["message"] == "body line"
    (matrix,) = receivers.of("matrix")
    assert matrix.method == "PUT" and "/rooms/" in matrix.path and "lanes: the title" in matrix.text
    assert MATRIX_ROOM.replace("!", "%21").replace(":", "%3A") in matrix.path  # the room the join answered
    gitea, forgejo = receivers.of("gitea")
    assert gitea.path.startswith("/api/v1/repos/team/ops/issues/12/comments")
    assert forgejo.path.startswith("/api/v1/repos/team/ops/issues/13/comments")
    assert gitea.json() == {"body": "**lanes: the title**\n\nbody line"}  # no other keys: Gitea's shape
    assert gitea.headers["authorization"] == f"token {TOKEN}"


def test_slack_and_discord_payloads_with_their_hosts_pointed_at_loopback(
    receivers: Receivers, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(NotifySlack, "webhook_url", f"http://{receivers.hostport}/services")
    monkeypatch.setattr(NotifyDiscord, "notify_url", f"http://{receivers.hostport}/api/webhooks")
    deliver("slack://{secret}", files["slack"])
    deliver("discord://{secret}", files["discord"])
    (slack,) = receivers.of("slack")
    assert slack.path == f"/services/{SLACK}"
    assert "lanes: the title" in slack.text and "body line" in slack.text
    (discord,) = receivers.of("discord")
    assert discord.path == f"/api/webhooks/{DISCORD}"
    assert "lanes: the title" in discord.text and "body line" in discord.text


def test_a_wrong_token_or_a_missing_file_is_a_receiver_error(receivers: Receivers, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong"
    wrong.write_text("tok_not_the_right_one_42\n")
    with pytest.raises(ReceiverError):
        deliver(f"gitea://{{secret}}@{receivers.hostport}/team/ops/12", wrong)
    with pytest.raises(ReceiverError):
        deliver(f"matrix://{{secret}}@{receivers.hostport}/#ops:localhost", wrong)
    with pytest.raises(ReceiverError, match="cannot be read"):
        deliver(f"json://{receivers.hostport}/hook/x?+X-Token={{secret}}", tmp_path / "absent")
    assert receivers.got == []


def test_a_known_secret_in_a_message_arrives_redacted(receivers: Receivers, files: dict[str, Path]) -> None:
    canary = "hf_canary_5f0e1d2c3b4a"
    forget_secrets()
    try:
        remember_secrets([canary])
        deliver(f"json://{receivers.hostport}/hook/x", body=f"engine said HF_TOKEN={canary} and died")
        deliver(f"ntfy://{receivers.hostport}/lanes?token={{secret}}", files["token"])
        # The receiver's own token is learnt by the redactor the moment it is read.
        assert redact(f"x {TOKEN} y") == "x [redacted] y"
    finally:
        forget_secrets()
    (hook,) = receivers.of("json")
    assert canary not in hook.body.decode() and "HF_TOKEN=[redacted]" in hook.json()["message"]


def test_gitea_urls_become_the_issue_comments_endpoint() -> None:
    https = ReceiverSettings(url="giteas://{secret}@forge.example.org:3443/team/ops/12", credential_file=Path("/x"))
    url, fold = apprise_url(https, "abc def")
    assert fold
    assert url == (
        "jsons://forge.example.org:3443/api/v1/repos/team/ops/issues/12/comments"
        "?:message=body&:title=&:version=&:type=&:attachments=&+Authorization=token%20abc%2520def"
    )
    with pytest.raises(ReceiverError, match="issue number"):
        apprise_url(ReceiverSettings(url="gitea://forge.example.org/team/ops"), None)
