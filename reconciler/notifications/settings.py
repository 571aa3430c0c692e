"""[notifications] in the daemon's settings: the receivers and how they are fed.

Receiver URLs live in the daemon's settings only (never in the state
repository, which anyone with push access writes). A URL names the service
in Apprise's own URL form; its secret part (a webhook token, an access
token) is written `{secret}` and read at send time from `credential_file`,
a file beside the daemon's other credentials ($CREDENTIALS_DIRECTORY under
systemd), so the settings file can be shown and the secret never is.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import Field, ValidationInfo, field_validator, model_validator

from reconciler.daemon.configpaths import Section, path_or_none

EventKind = Literal[
    "commit.denied",
    "commit.refused",
    "lane.failed",
    "lane.rolled_back",
    "lane.rolled_out",
    "host.unreachable",
    "host.back",
    "proposal.opened",
    "evidence.regression",
    "trial.reported",
]
EVENT_KINDS: tuple[str, ...] = get_args(EventKind)

PLACEHOLDER = "{secret}"
"""Where the credential file's value goes in a receiver URL."""

SCHEMES = frozenset(
    {
        # Apprise's own schemes (apprise 2.3.0, apprise/plugins/<name>.py: `protocol` / `secure_protocol`).
        "slack",  # plugins/slack.py: slack://TokenA/TokenB/TokenC[/#channel]
        "discord",  # plugins/discord.py: discord://WebhookID/WebhookToken
        "matrix",  # plugins/matrix/base.py: matrix(s)://token@host[:port]/#room
        "matrixs",
        "ntfy",  # plugins/ntfy.py: ntfy(s)://host[:port]/topic, ?token=... for a bearer token
        "ntfys",
        "json",  # plugins/custom_json.py: json(s)://host[:port]/path, the generic JSON webhook
        "jsons",
        # Not in Apprise: a comment on a Gitea / Forgejo issue, sent through Apprise's JSON webhook
        # (reconciler.notifications.receivers turns these into a jsons:// URL).
        "gitea",
        "giteas",
        "forgejo",
        "forgejos",
    }
)

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class ReceiverSettings(Section):
    """[notifications.receivers.<name>]: one chat room or webhook and what it is told."""

    url: str = Field(
        min_length=3,
        description="where to send, as an Apprise URL: slack://{secret}, discord://{secret}, "
        "matrixs://{secret}@matrix.example.org/#ops:example.org, ntfys://ntfy.example.org/lanes?token={secret}, "
        "jsons://hooks.example.org/lanes, or giteas://forge.example.org/team/ops/12 (a comment on issue 12 with "
        "the token {secret}); write the secret part as {secret}, never the token itself",
    )
    credential_file: Path | None = Field(
        None,
        description="file holding what {secret} stands for (e.g. $CREDENTIALS_DIRECTORY/slack-webhook: "
        "TokenA/TokenB/TokenC); read at send time, redacted from every log line; never a lane secret",
    )
    events: tuple[EventKind, ...] = Field(
        (),
        description=f"event kinds sent here (none listed: all): {', '.join(EVENT_KINDS)}",
    )
    lanes: tuple[str, ...] = Field(
        (),
        description='lanes whose events are sent here, as names or shell patterns ("dsv41-*"); none: every '
        "lane; a host's events go where any lane on that host goes, a refused commit goes everywhere",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description='host labels a lane or host must carry to be sent here ({ role = "production" }: a lane '
        "with a host labelled so); none: no condition",
    )
    rate_per_minute: float = Field(
        20.0, gt=0, le=600, description="messages per minute at most; more wait their turn (a burst of 5 at once)"
    )

    @field_validator("credential_file", mode="before")
    @classmethod
    def _path(cls, value: Any, info: ValidationInfo) -> Any:
        return path_or_none(value, info)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        scheme, sep, rest = value.partition("://")
        if not sep or scheme.lower() not in SCHEMES:
            raise ValueError(f"'{scheme}://' is not a receiver lanes sends to (one of: {', '.join(sorted(SCHEMES))})")
        authority = rest.split("/", 1)[0]
        userinfo = authority.rpartition("@")[0]
        if ":" in userinfo and PLACEHOLDER not in userinfo:
            raise ValueError("the url holds a password; write {secret} there and put the value in credential_file")
        return value

    @field_validator("lanes")
    @classmethod
    def _patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            if not re.match(r"^[A-Za-z0-9_.*?\[\]!-]+$", pattern):
                raise ValueError(f"'{pattern}' is not a lane name or shell pattern")
        return value

    @model_validator(mode="after")
    def _secret_and_file(self) -> ReceiverSettings:
        if PLACEHOLDER in self.url and self.credential_file is None:
            raise ValueError("the url has {secret} but no credential_file says what it is")
        if self.credential_file is not None and PLACEHOLDER not in self.url:
            raise ValueError("credential_file is set but the url has no {secret} to put its value in")
        return self

    def wants(self, kind: str, lanes: tuple[str, ...], labels: dict[str, set[str]]) -> bool:
        """Whether an event of `kind` about `lanes` (none: the whole fleet) with `labels` is sent here."""
        if self.events and kind not in self.events:
            return False
        if not lanes:
            return True
        if self.lanes and not any(fnmatch.fnmatchcase(lane, p) for lane in lanes for p in self.lanes):
            return False
        return all(value in labels.get(key, set()) for key, value in self.labels.items())


class NotificationSettings(Section):
    """[notifications]: tell people what the daemon did or could not do."""

    attempts: int = Field(4, ge=1, le=20, description="tries per message and receiver before it is given up")
    backoff_s: float = Field(
        2.0, gt=0, le=600, description="seconds before the second try; doubled for each next one, up to backoff_max_s"
    )
    backoff_max_s: float = Field(60.0, gt=0, le=3600, description="the longest wait between two tries")
    timeout_s: float = Field(
        10.0, gt=0, le=120, description="seconds a receiver has to accept the connection, and again to answer"
    )
    queue_size: int = Field(
        200, ge=1, le=100_000, description="messages waiting per receiver at most; past it the oldest is dropped"
    )
    dedup_window_s: float = Field(
        86400.0,
        ge=0,
        le=30 * 86400,
        description="seconds an event (kind, lane or host, commit) is remembered so a repeat is not sent again",
    )
    receivers: dict[str, ReceiverSettings] = Field(
        default_factory=dict, description="the receivers by name; none: nothing is sent"
    )

    @field_validator("receivers")
    @classmethod
    def _names(cls, value: dict[str, ReceiverSettings]) -> dict[str, ReceiverSettings]:
        for name in value:
            if not _NAME.match(name):
                raise ValueError(f"receiver name '{name}' is not a plain name (letters, digits, . _ -)")
        return value

    def credential_files(self) -> dict[str, Path | None]:
        """The receivers' secret files, as the daemon's own credentials (redacted, kept apart from lane secrets)."""
        return {f"notifications.receivers.{n}.credential_file": r.credential_file for n, r in self.receivers.items()}
