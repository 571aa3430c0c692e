"""Upstream sources (`state/upstreams.yaml`): what lanes polls for new engine releases."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from reconciler.spec.base import Name, StrictModel


class GitHubReleases(StrictModel):
    kind: Literal["github-releases"]
    name: Name
    repo: str = Field(pattern=r"^[\w.-]+/[\w.-]+$", description="owner/name")
    api_url: str = Field(default="https://api.github.com")
    tag_filter: str | None = Field(default=None, description="regular expression a tag must match")
    token_credential: str | None = Field(default=None, description="credential name holding a token")
    interval_s: int = Field(default=3600, ge=60)


class OCIRepository(StrictModel):
    kind: Literal["oci"]
    name: Name
    registry: str = Field(description="registry host, e.g. registry-1.docker.io, ghcr.io, nvcr.io")
    repository: str = Field(description="repository path, e.g. lmsysorg/sglang")
    tag_filter: str | None = None
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
