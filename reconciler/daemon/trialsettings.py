"""[forge] and [experiments]: the daemon's pull requests, and the branches people try on spare hosts.

Kept apart from `config.py` (one section family per module): both sections serve trials. `[forge]`
names where the state repository's pull requests live, so the daemon's proposals open one and a
trial's comparison is posted on the pull request of its branch. `[experiments]` turns on the job that
tries every branch under `lanes/trials/` on the spare hosts it names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from reconciler.daemon.configpaths import Section, path_or_none
from reconciler.spec.base import NAME_RE
from reconciler.upstream.forge import ForgeSettings

TRIAL_BRANCH_PREFIX = "lanes/trials/"
"""Branches a person pushes to have an idea tried; the proposals' own branches are `lanes/proposals/`."""


class ForgeSection(Section):
    """[forge]: the forge holding the state repository's pull requests (GitHub, Gitea or Forgejo)."""

    kind: Literal["", "github", "gitea"] = Field(
        "", description='"github" or "gitea" (also Forgejo); empty: no pull requests are opened or commented'
    )
    api_url: str = Field("", description="https://api.github.com, or the Gitea/Forgejo base URL (without /api/v1)")
    repo: str = Field("", description="owner/name of the state repository on the forge")
    token_file: Path | None = Field(
        None, description="file holding the forge's API token (sent over https only, never in a URL)"
    )

    @field_validator("token_file", mode="before")
    @classmethod
    def _token_path(cls, value: Any, info: ValidationInfo) -> Any:
        return path_or_none(value, info)

    @model_validator(mode="after")
    def _complete(self) -> ForgeSection:
        if self.kind and (not self.api_url or not self.repo):
            raise ValueError("forge.kind needs api_url and repo (owner/name)")
        return self

    def settings(self) -> ForgeSettings | None:
        """What the forge client takes, or None without a forge; the token is named by its file's name."""
        if not self.kind:
            return None
        token = self.token_file.name if self.token_file is not None else None
        return ForgeSettings(kind=self.kind, api_url=self.api_url, repo=self.repo, token_credential=token)

    def token_dir(self) -> Path | None:
        return None if self.token_file is None else self.token_file.parent


class ExperimentSettings(Section):
    """[experiments]: branches under lanes/trials/ that change lanes are tried on spare hosts and measured."""

    enabled: bool = Field(False, description="try every new head of a lanes/trials/... branch on the spare hosts")
    hosts: tuple[str, ...] = Field(
        (),
        description="spare hosts (state host names) a trial may use, in order; a lane's track.trial_hosts, "
        "when set on the branch, wins",
    )
    interval_s: float = Field(
        300.0, ge=10, le=86400, description="seconds between looks at the trial branches (a fetch of lanes/trials/*)"
    )

    @field_validator("hosts")
    @classmethod
    def _names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not NAME_RE.match(name):
                raise ValueError(f"'{name}' is not a host name (lower-case letters, digits, . _ -)")
        return value
