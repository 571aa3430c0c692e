"""Upstream tags are checked against the OCI tag grammar before anything records them (issue 14).

A release's tag_name or a registry's tag list is someone else's string, and a
recorded tag becomes an image reference (`repo:tag`), a proposal branch
`lanes/proposals/<lane>/<version>`, a commit trailer and pull-request text.
The grammar is the OCI distribution spec's (spec.md, "Pulling manifests"):
`[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}`. Tags outside it are never recorded;
the rest of the poll goes on.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from reconciler.spec.upstream import GitHubReleases, OCIRepository
from reconciler.upstream.base import PollSettings
from reconciler.upstream.github import poll_github
from reconciler.upstream.oci import poll_oci
from reconciler.upstream.store import UpstreamStore
from reconciler.upstream.versions import valid_tag
from tests.upstream.conftest import VirtualClock
from tests.upstream.servers import App, FakeGitHub, FakeRegistry, LocalServer

pytestmark = pytest.mark.timeout(30)

HOSTILE = [
    "v0.6.0/../../refs/heads/main",  # a path in a branch name
    "v0.6.0\nLane: production",  # a forged commit trailer
    "v0.6.0 --force",  # a space (an argument on a command line)
    "-v0.6.0",  # a leading dash (an option)
    ".v0.6.0",  # a leading dot
    "v" + "1" * 128,  # 129 characters
    "v0.6.0:latest@sha256:" + "0" * 64,  # a reference inside a tag
    "v0.6.0\u00e9",  # not ASCII
]
GOOD = ["v0.5.22", "nightly-20261015", "26.10-py3", "_x", "v" + "1" * 127]


def test_the_grammar() -> None:
    assert all(valid_tag(t) for t in GOOD)
    assert not any(valid_tag(t) for t in HOSTILE)
    assert not valid_tag("") and not valid_tag(None) and not valid_tag(7)


async def test_github_release_tags_outside_the_grammar_are_not_recorded(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    gh = FakeGitHub(("sgl-project/sglang",))
    for tag in [*HOSTILE, "v0.5.22"]:
        gh.add("sgl-project/sglang", tag, "2026-10-19T12:00:00Z")
    server = serve(gh)
    src = GitHubReleases(kind="github-releases", name="sglang", repo="sgl-project/sglang", api_url=server.url)
    result = await poll_github(src, store, client, settings.model_copy(update={"page_size": 100}), vclock.clock())
    assert result.status == "new"
    assert store.known_tags("sglang") == {"v0.5.22"}


async def test_registry_tags_outside_the_grammar_are_not_recorded_nor_asked_for(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    registry = FakeRegistry({"lmsysorg/sglang": ["v0.5.22", *HOSTILE]})
    server = serve(registry)
    src = OCIRepository(
        kind="oci", name="sglang-images", registry=server.host, repository="lmsysorg/sglang", insecure=True
    )
    result = await poll_oci(src, store, client, settings.model_copy(update={"page_size": 100}), vclock.clock())
    assert result.status == "new" and result.new == ("v0.5.22",)
    assert store.known_tags("sglang-images") == {"v0.5.22"}
    asked = [r.path for r in server.requests if "/manifests/" in r.path]
    assert asked and all(p.endswith("/manifests/v0.5.22") for p in asked)
