"""The OCI poller against a local registry behind the distribution token flow."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import httpx
import pytest

from reconciler.errors import PermanentError
from reconciler.spec.upstream import OCIRepository
from reconciler.upstream.base import PollSettings
from reconciler.upstream.oci import newest_first, poll_oci
from reconciler.upstream.registry import ImageReference, resolve_image
from reconciler.upstream.store import UpstreamStore
from tests.upstream.conftest import NOW, VirtualClock
from tests.upstream.servers import INDEX, MANIFEST_LIST, App, FakeRegistry, LocalServer
from tests.upstream.tokens import with_token

pytestmark = pytest.mark.timeout(30)

REPO = "eugr/spark-vllm-b12x"
TAGS = ["nightly-20261013", "nightly-20261014", "nightly-20261015", "latest", "b12x-dev"]


def oci_source(server: LocalServer, **extra: object) -> OCIRepository:
    return OCIRepository.model_validate(
        {
            "kind": "oci",
            "name": "eugr-b12x",
            "registry": server.host,
            "repository": REPO,
            "insecure": True,
            "tag_filter": "^nightly-",
            **extra,
        }
    )


async def test_token_flow_then_paged_tags_then_a_head_per_new_tag_for_the_index_digest(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    registry = FakeRegistry({REPO: TAGS})
    server = serve(registry)
    result = await poll_oci(oci_source(server), store, client, settings, vclock.clock())
    assert result.status == "new"
    assert set(result.new) == {"nightly-20261013", "nightly-20261014", "nightly-20261015"}
    seen = [(r.method, r.path, r.query.get("last")) for r in server.requests]
    assert seen[:3] == [
        ("GET", f"/v2/{REPO}/tags/list", None),
        ("GET", "/token", None),
        ("GET", f"/v2/{REPO}/tags/list", None),
    ]
    # Five tags at n=2: three pages, each page after the first asked for with `last` from the Link.
    pages = [r for r in server.requests if r.path.endswith("/tags/list")][1:]
    assert [r.query.get("last") for r in pages] == [None, "latest", "nightly-20261014"]
    assert all(r.query["n"] == "2" for r in pages)
    token_request = registry.auth_requests[0]
    assert token_request.query == {"service": "fake-registry", "scope": f"repository:{REPO}:pull"}
    assert "authorization" not in token_request.headers  # anonymous pull token
    heads = [r for r in server.requests if r.method == "HEAD"]
    assert sorted(r.path.rsplit("/", 1)[1] for r in heads) == sorted(result.new)
    for r in heads:
        accept = r.headers["accept"]
        assert accept.index(INDEX) < accept.index("application/vnd.oci.image.manifest.v1+json")
        assert MANIFEST_LIST in accept and r.headers["authorization"].startswith("Bearer ")
    assert len(registry.auth_requests) == 1  # the token is reused for every later request
    rec = store.release("eugr-b12x", "nightly-20261015")
    assert rec is not None and rec.digest == registry.digest(REPO, "nightly-20261015")
    assert rec.published == "2026-10-15" and rec.version is None
    assert rec.url == f"{server.host}/{REPO}:nightly-20261015"


async def test_a_second_poll_heads_only_new_tags(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    registry = FakeRegistry({REPO: TAGS})
    server = serve(registry)
    await poll_oci(oci_source(server), store, client, settings, vclock.clock())
    registry.add(REPO, "nightly-20261016")
    before = len(server.requests)
    result = await poll_oci(oci_source(server), store, client, settings, vclock.clock())
    later = server.requests[before:]
    assert result.new == ("nightly-20261016",)
    assert [r.method for r in later if r.method == "HEAD"] == ["HEAD"]
    assert all(
        r.path.endswith("/tags/list") or r.path.endswith("nightly-20261016") or r.path == "/token" for r in later
    )


async def test_a_missing_docker_content_digest_is_computed_from_the_manifest_body(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    registry = FakeRegistry({REPO: ["nightly-20261015"]})
    registry.send_digest = False
    server = serve(registry)
    await poll_oci(oci_source(server), store, client, settings, vclock.clock())
    rec = store.release("eugr-b12x", "nightly-20261015")
    body = registry.body(REPO, "nightly-20261015")
    assert rec is not None and rec.digest == "sha256:" + hashlib.sha256(body).hexdigest()
    methods = [r.method for r in server.requests if "/manifests/" in r.path]
    assert methods == ["HEAD", "GET"]


async def test_credentials_are_sent_to_the_token_realm_only(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    registry = FakeRegistry({REPO: ["nightly-20261015"]}, user="robot", password="s3cret-registry-pass")
    server = serve(registry)
    settings = with_token(settings, "registry", "robot:s3cret-registry-pass")
    result = await poll_oci(oci_source(server, token_credential="registry"), store, client, settings, vclock.clock())
    assert result.status == "new"
    assert registry.auth_requests[0].headers["authorization"].startswith("Basic ")
    registry_calls = [r for r in server.requests if r.path != "/token"]
    assert all(not r.headers.get("authorization", "").startswith("Basic ") for r in registry_calls)


async def test_wrong_credentials_fail_the_poll(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    server = serve(FakeRegistry({REPO: ["nightly-20261015"]}, user="robot", password="right"))
    settings = with_token(settings, "registry", "robot:wrong")
    result = await poll_oci(oci_source(server, token_credential="registry"), store, client, settings, vclock.clock())
    assert result.status == "failed" and "token request refused (HTTP 401)" in (result.error or "")
    assert "wrong" not in (result.error or "")


async def test_docker_hub_ratelimit_remaining_zero_defers_the_source_for_the_window(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    registry = FakeRegistry({REPO: ["nightly-20261015"]})
    registry.hub_remaining = "0;w=21600"
    server = serve(registry)
    result = await poll_oci(oci_source(server), store, client, settings, vclock.clock())
    assert result.status == "rate-limited" and result.next_allowed == NOW + 21600
    count = len(server.requests)
    assert (await poll_oci(oci_source(server), store, client, settings, vclock.clock())).status == "skipped"
    assert len(server.requests) == count


async def test_an_unknown_repository_is_a_failed_poll(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    server = serve(FakeRegistry({"other/repo": ["x"]}))
    result = await poll_oci(oci_source(server), store, client, settings, vclock.clock())
    assert result.status == "failed" and "HTTP 404" in (result.error or "")


async def test_resolve_image_pins_a_template_reference_by_its_index_digest(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    registry = FakeRegistry({"lmsysorg/sglang": ["v0.5.22-cu130"]})
    server = serve(registry)
    src = OCIRepository(
        kind="oci", name="sglang-images", registry=server.host, repository="lmsysorg/sglang", insecure=True
    )
    pinned = await resolve_image(
        f"{server.host}/lmsysorg/sglang:v0.5.22-cu130", [src], client, settings, vclock.clock(), store
    )
    assert pinned == f"{server.host}/lmsysorg/sglang@{registry.digest('lmsysorg/sglang', 'v0.5.22-cu130')}"


def test_image_references_follow_docker_naming() -> None:
    hub = ImageReference.parse("lmsysorg/sglang:v0.5.22-cu130")
    assert (hub.registry, hub.repository, hub.tag) == ("registry-1.docker.io", "lmsysorg/sglang", "v0.5.22-cu130")
    assert ImageReference.parse("ubuntu").repository == "library/ubuntu"
    local = ImageReference.parse("127.0.0.1:5000/team/vllm:nightly")
    assert (local.registry, local.repository, local.tag) == ("127.0.0.1:5000", "team/vllm", "nightly")
    nvcr = ImageReference.parse("nvcr.io/nvidia/vllm:26.10-py3")
    assert (nvcr.registry, nvcr.repository) == ("nvcr.io", "nvidia/vllm")
    assert nvcr.pinned("sha256:" + "a" * 64) == "nvcr.io/nvidia/vllm@sha256:" + "a" * 64
    with pytest.raises(PermanentError):
        ImageReference.parse("repo@sha256:short")


async def test_the_cap_on_heads_keeps_the_newest_versions_not_the_highest_strings(
    serve: Callable[[App], LocalServer],
    store: UpstreamStore,
    settings: PollSettings,
    client: httpx.AsyncClient,
    vclock: VirtualClock,
) -> None:
    # As strings v0.9.2 sorts above v0.32.1 and v0.10.0; as versions it is the oldest of the three.
    registry = FakeRegistry({"vllm/vllm-openai": ["v0.9.2", "v0.10.0", "v0.32.1", "latest"]})
    server = serve(registry)
    source = oci_source(server, name="vllm-images", repository="vllm/vllm-openai", tag_filter="^v")
    capped = settings.model_copy(update={"max_digests_per_poll": 2})
    result = await poll_oci(source, store, client, capped, vclock.clock())
    assert result.new == ("v0.32.1", "v0.10.0")
    assert {r.tag for r in store.releases("vllm-images")} == {"v0.32.1", "v0.10.0"}
    # The next poll takes the one left behind.
    assert (await poll_oci(source, store, client, capped, vclock.clock())).new == ("v0.9.2",)


def test_tags_order_by_version_then_date_then_name() -> None:
    tags = [
        "latest",
        "nightly-20261015",
        "v0.9.2",
        "b12x-dev",
        "v0.10.0-cu130",
        "nightly-20261101",
        "v0.10.0",
        "v0.32.1",
        "v0.33.0rc1",
        "nightly-20260930",
    ]
    assert newest_first(tags) == [
        "v0.33.0rc1",
        "v0.32.1",
        "v0.10.0",
        "v0.10.0-cu130",
        "v0.9.2",
        "nightly-20261101",
        "nightly-20261015",
        "nightly-20260930",
        "b12x-dev",
        "latest",
    ]
    assert newest_first(reversed(tags)) == newest_first(tags)
