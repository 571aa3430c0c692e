"""Platforms of an image as a distribution registry serves it: index, manifest list, single manifests."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from reconciler.errors import PermanentError
from reconciler.spec.upstream import OCIRepository
from reconciler.upstream.base import PollSettings
from reconciler.upstream.platforms import image_platforms, index_platforms, release_platforms, runs_on_spark
from reconciler.upstream.registry import ACCEPT
from reconciler.upstream.store import ReleaseRecord, UpstreamStore
from tests.upstream.conftest import VirtualClock
from tests.upstream.servers import DOCKER_MANIFEST, INDEX, MANIFEST_LIST, App, FakeRegistry, ImageKind, LocalServer

pytestmark = pytest.mark.timeout(30)

REPO = "lmsysorg/sglang"


def source(server: LocalServer) -> OCIRepository:
    return OCIRepository(kind="oci", name="sglang-images", registry=server.host, repository=REPO, insecure=True)


@pytest.mark.parametrize(
    ("kind", "platforms", "expected", "blob_reads"),
    [
        # buildx's index: two images and an attestation manifest listed as unknown/unknown (left out).
        ("oci-index", ("linux/amd64", "linux/arm64"), ("linux/amd64", "linux/arm64"), 0),
        ("docker-list", ("linux/amd64",), ("linux/amd64",), 0),
        ("docker-list", ("linux/arm64/v8", "linux/amd64"), ("linux/amd64", "linux/arm64/v8"), 0),
        # A single-platform manifest names no platform itself: its config blob does.
        ("oci-manifest", ("linux/arm64/v8",), ("linux/arm64/v8",), 1),
        ("docker-manifest", ("linux/amd64",), ("linux/amd64",), 1),
    ],
)
async def test_platforms_from_the_index_or_the_config_blob(
    serve: Callable[[App], LocalServer],
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
    kind: ImageKind,
    platforms: tuple[str, ...],
    expected: tuple[str, ...],
    blob_reads: int,
) -> None:
    registry = FakeRegistry({})
    digest = registry.add(REPO, "v0.5.22-cu130", platforms=platforms, kind=kind)
    server = serve(registry)
    pinned = f"{server.host}/{REPO}@{digest}"
    found = await image_platforms(pinned, [source(server)], client, settings, vclock.clock())
    assert (found.image, found.platforms) == (pinned, expected)
    assert found.arm64 == runs_on_spark(expected) == any(p.startswith("linux/arm64") for p in expected)
    reads = [r for r in server.requests if r.path != "/token" and r.headers.get("authorization")]
    assert (reads[0].method, reads[0].path) == ("GET", f"/v2/{REPO}/manifests/{digest}")
    assert reads[0].headers["accept"] == ACCEPT
    assert sum("/blobs/" in r.path for r in reads) == blob_reads


async def test_an_answer_that_does_not_hash_to_the_digest_is_refused(
    serve: Callable[[App], LocalServer], settings: PollSettings, client: httpx.AsyncClient, vclock: VirtualClock
) -> None:
    registry = FakeRegistry({})
    digest = registry.add(REPO, "v0.5.22-cu130")
    media_type, body = registry.blobs[REPO][digest]
    registry.blobs[REPO][digest] = (media_type, body.replace(b"arm64", b"amd64"))  # a tampered index
    server = serve(registry)
    with pytest.raises(PermanentError, match="does not hash to"):
        await image_platforms(f"{server.host}/{REPO}@{digest}", [source(server)], client, settings, vclock.clock())


def test_index_entries_without_a_platform_and_attestations_are_not_platforms() -> None:
    index = {
        "manifests": [
            {"digest": "sha256:" + "a" * 64, "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
            {"digest": "sha256:" + "b" * 64},
            {"digest": "sha256:" + "c" * 64, "platform": {"os": "unknown", "architecture": "unknown"}},
            {"digest": "sha256:" + "d" * 64, "platform": {"os": "linux", "architecture": "amd64"}},
        ]
    }
    assert index_platforms(index) == ("linux/amd64", "linux/arm64/v8")
    assert not runs_on_spark(("linux/amd64", "linux/arm/v7", "linux/arm64be"))
    assert runs_on_spark(("linux/arm64",)) and runs_on_spark(("linux/arm64/v8",))


async def test_the_test_registry_negotiates_like_distribution(
    serve: Callable[[App], LocalServer], client: httpx.AsyncClient
) -> None:
    """distribution's GetManifest (registry/handlers/manifests.go): what a client gets for what it accepts."""
    registry = FakeRegistry({})
    oci = registry.add(REPO, "oci", kind="oci-index")
    listed = registry.add(REPO, "list", kind="docker-list", platforms=("linux/arm64", "linux/amd64"))
    server = serve(registry)
    registry.tokens["t"] = f"repository:{REPO}:pull"
    auth = {"Authorization": "Bearer t"}

    async def get(ref: str, accept: str, method: str = "GET", **extra: str) -> httpx.Response:
        url = f"{server.url}/v2/{REPO}/manifests/{ref}"
        return await client.request(method, url, headers={**auth, "Accept": accept, **extra})

    index = await get("oci", ACCEPT)
    assert index.status_code == 200 and index.headers["docker-content-digest"] == oci
    assert (index.headers["content-type"], index.headers["etag"]) == (INDEX, f'"{oci}"')
    head = await get("oci", ACCEPT, "HEAD")
    assert head.status_code == 200 and head.content == b"" and head.headers["docker-content-digest"] == oci
    assert (await get(oci, ACCEPT, **{"If-None-Match": f'"{oci}"'})).status_code == 304
    refused = await get("oci", DOCKER_MANIFEST)
    assert refused.status_code == 404 and refused.json()["errors"][0]["code"] == "MANIFEST_UNKNOWN"
    # An old client that does not accept manifest lists gets the linux/amd64 image instead.
    fallback = await get("list", DOCKER_MANIFEST)
    amd64 = [m["digest"] for m in json.loads(registry.body(REPO, "list"))["manifests"] if "amd64" in str(m)]
    assert fallback.headers["docker-content-digest"] == amd64[0] != listed
    assert (await get("list", MANIFEST_LIST)).headers["docker-content-digest"] == listed


async def test_platforms_are_read_once_per_digest_and_kept_with_the_release(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    registry = FakeRegistry({})
    digest = registry.add(REPO, "v0.5.22-cu130", platforms=("linux/amd64",), kind="docker-list")
    server = serve(registry)
    store.record_release(ReleaseRecord("sglang-releases", "v0.5.22", "0.5.22"))
    pinned = f"{server.host}/{REPO}@{digest}"
    release = store.release("sglang-releases", "v0.5.22")
    assert release is not None and release.platforms is None
    first = await release_platforms(store, release, pinned, [source(server)], client, settings, vclock.clock())
    assert first.platforms == ("linux/amd64",) and not first.arm64
    recorded = store.release("sglang-releases", "v0.5.22")
    assert recorded is not None and (recorded.platforms, recorded.platforms_image) == (("linux/amd64",), pinned)
    count = len(server.requests)
    again = await release_platforms(store, recorded, pinned, [source(server)], client, settings, vclock.clock())
    assert again == first and len(server.requests) == count  # the digest was read already
    # A poll that records the release again keeps what was read.
    store.record_release(ReleaseRecord("sglang-releases", "v0.5.22", "0.5.22"))
    kept = store.release("sglang-releases", "v0.5.22")
    assert kept is not None and kept.platforms == ("linux/amd64",)


def test_a_store_written_before_platforms_gets_the_columns_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as old:  # upstream_releases as the store created it before platforms
        old.execute(
            "create table upstream_releases (source text, tag text, version text, variant text, published text, "
            "digest text, url text, notes_url text, prerelease integer, first_seen float, primary key (source, tag))"
        )
        old.execute("insert into upstream_releases (source, tag, version) values ('s', 'v1', '1')")
    old.close()
    with UpstreamStore(path) as store:
        before = store.release("s", "v1")
        assert before is not None and before.platforms is None and before.platforms_image is None
        store.record_platforms("s", "v1", "r/x@sha256:" + "e" * 64, ("linux/arm64",))
        after = store.release("s", "v1")
        assert after is not None and after.platforms == ("linux/arm64",)
