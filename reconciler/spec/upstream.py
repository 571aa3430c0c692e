"""Upstream sources (`state/upstreams.yaml`): what lanes polls for new engine releases."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from reconciler.spec.base import Name, StrictModel
from reconciler.spec.saferegex import check_pattern


def _linear_time(pattern: str) -> str:
    why = check_pattern(pattern)
    if why is not None:
        raise ValueError(why)
    return pattern


TagFilter = Annotated[str, AfterValidator(_linear_time)]
"""A tag filter runs against every tag an upstream lists: RE2 syntax, checked at load (spec.saferegex)."""


class GitHubReleases(StrictModel):
    kind: Literal["github-releases"]
    name: Name
    repo: str = Field(pattern=r"^[\w.-]+/[\w.-]+$", description="owner/name")
    api_url: str = Field(default="https://api.github.com")
    tag_filter: TagFilter | None = Field(
        default=None, description="regular expression a tag must match (RE2 syntax: no backreferences or lookaround)"
    )
    token_credential: str | None = Field(default=None, description="credential name holding a token")
    interval_s: int = Field(default=3600, ge=60)


class OCIRepository(StrictModel):
    kind: Literal["oci"]
    name: Name
    registry: str = Field(description="registry host, e.g. registry-1.docker.io, ghcr.io, nvcr.io")
    repository: str = Field(description="repository path, e.g. lmsysorg/sglang")
    tag_filter: TagFilter | None = Field(default=None, description="regular expression a tag must match (RE2 syntax)")
    token_credential: str | None = None
    insecure: bool = Field(default=False, description="plain HTTP (local registries only)")
    interval_s: int = Field(default=3600, ge=60)


class GitHead(StrictModel):
    kind: Literal["git-head"]
    name: Name
    url: str
    branch: str = "main"
    interval_s: int = Field(default=1800, ge=60)


UpstreamSource = Annotated[GitHubReleases | OCIRepository | GitHead, Field(discriminator="kind")]


class UpstreamsFile(StrictModel):
    sources: tuple[UpstreamSource, ...] = ()
