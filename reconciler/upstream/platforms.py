"""Which platforms an image is published for, read from its manifest as the registry serves it.

Sparks are arm64 (GB10's CPU is 20 Arm v9.2 cores; docs.nvidia.com/dgx/
dgx-spark-porting-guide/overview.html), so an engine image without a linux/arm64
build cannot run on them; `docker pull` on a Spark would fail with "no
matching manifest for linux/arm64/v8". A proposal must find that out before
it is made, not on the hosts. The answer is in the manifest a pinned digest
names:

- an OCI image index (`application/vnd.oci.image.index.v1+json`) or a Docker
  manifest list (`application/vnd.docker.distribution.manifest.list.v2+json`)
  lists one entry per platform, each with `platform.os`, `.architecture` and
  optional `.variant` (distribution/distribution manifest/manifestlist
  PlatformSpec; OCI image-spec image-index.md). buildx adds attestation
  manifests listed as `unknown/unknown` (docs.docker.com/build/metadata/
  attestations/attestation-storage); they are not platforms and are left out.
- a single-platform manifest (OCI or Docker schema 2) says nothing itself:
  its config blob carries `architecture`, `os` and `variant` (OCI image-spec
  config.md; Docker's image config has the same fields).

Reading a manifest body is a GET, which Docker Hub counts as a pull (HEADs it
does not), so platforms are read once per digest, only for an image about
to be proposed, and kept with the release (`UpstreamStore.record_platforms`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from reconciler.errors import PermanentError
from reconciler.spec.upstream import UpstreamSource
from reconciler.upstream.base import Clock, PollSettings, Requester
from reconciler.upstream.registry import (
    ACCEPT,
    ImageReference,
    RegistryClient,
    credential_for,
    raise_for,
    source_for,
)
from reconciler.upstream.store import ReleaseRecord, UpstreamStore

INDEX_TYPES = frozenset(
    {"application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"}
)
SPARK_PLATFORM = "linux/arm64"
"""What a Spark pulls: docker names aarch64 linux/arm64 (variant v8), whatever the Arm v9.2 cores could do."""


@dataclass(frozen=True)
class ImagePlatforms:
    """The platforms one image digest offers, `os/architecture[/variant]`, sorted."""

    image: str
    """The pinned reference they were read from (`repo@sha256:...`)."""
    platforms: tuple[str, ...]

    @property
    def arm64(self) -> bool:
        return runs_on_spark(self.platforms)


def runs_on_spark(platforms: Sequence[str]) -> bool:
    """linux/arm64 with any variant (v8 is what docker reports for aarch64; images often omit it)."""
    return any(p == SPARK_PLATFORM or p.startswith(SPARK_PLATFORM + "/") for p in platforms)


def describe(platforms: Sequence[str]) -> str:
    return ", ".join(platforms) if platforms else "no platform named"


def _name(entry: dict[str, Any]) -> str | None:
    os_, arch = entry.get("os"), entry.get("architecture")
    if not isinstance(os_, str) or not isinstance(arch, str) or not os_ or not arch:
        return None
    if (os_, arch) == ("unknown", "unknown"):
        return None  # a buildx attestation manifest, not an image
    variant = entry.get("variant")
    return f"{os_}/{arch}" + (f"/{variant}" if isinstance(variant, str) and variant else "")


def index_platforms(document: dict[str, Any]) -> tuple[str, ...]:
    """The platforms an image index or manifest list names (entries without one are left out)."""
    found = set()
    for entry in document.get("manifests") or []:
        platform = entry.get("platform") if isinstance(entry, dict) else None
        name = _name(platform) if isinstance(platform, dict) else None
        if name is not None:
            found.add(name)
    return tuple(sorted(found))


def _verified_json(response: httpx.Response, digest: str, what: str) -> dict[str, Any]:
    """A content-addressed body, checked against its digest (as docker does on pull), parsed as JSON."""
    if "sha256:" + hashlib.sha256(response.content).hexdigest() != digest:
        raise PermanentError(f"{what}: the registry's answer does not hash to {digest}")
    try:
        body = json.loads(response.content)
    except ValueError:
        raise PermanentError(f"{what}: not JSON") from None
    if not isinstance(body, dict):
        raise PermanentError(f"{what}: not a JSON object")
    return body


async def read_platforms(reg: RegistryClient, repository: str, digest: str) -> tuple[str, ...]:
    """The platforms of `repository@digest`: from the index, or from a single manifest's config blob."""
    what = f"{reg.registry}/{repository}@{digest}"
    response = await reg.request("GET", f"{reg.base}/v2/{repository}/manifests/{digest}", repository, ACCEPT)
    if response.status_code != 200:
        raise_for(response, what)
    manifest = _verified_json(response, digest, what)
    media_type = response.headers.get("content-type", "").split(";")[0].strip() or manifest.get("mediaType")
    if media_type in INDEX_TYPES or isinstance(manifest.get("manifests"), list):
        return index_platforms(manifest)
    config = manifest.get("config")
    config_digest = config.get("digest") if isinstance(config, dict) else None
    if not isinstance(config_digest, str):
        raise PermanentError(f"{what}: neither an index nor a manifest with a config")
    blob = await reg.request("GET", f"{reg.base}/v2/{repository}/blobs/{config_digest}", repository)
    if blob.status_code != 200:
        raise_for(blob, f"{what} config {config_digest}")
    name = _name(_verified_json(blob, config_digest, f"{what} config"))
    return (name,) if name else ()


async def image_platforms(
    pinned: str,
    sources: Sequence[UpstreamSource],
    client: httpx.AsyncClient,
    settings: PollSettings,
    clock: Clock | None = None,
) -> ImagePlatforms:
    """Platforms of a pinned image (`repo@sha256:...`), with the credentials and plain-HTTP setting of
    the OCI source in upstreams.yaml that names the same registry (as `resolve_image`)."""
    ref = ImageReference.parse(pinned)
    if ref.digest is None:
        raise PermanentError(f"'{pinned}' is not pinned by digest")
    source = source_for(ref.registry, ref.repository, sources)
    insecure = bool(source and source.insecure)
    credential = credential_for(settings, source.token_credential if source else None, ref.registry, insecure)
    requester = Requester(client, settings, clock or Clock())
    reg = RegistryClient(requester, ref.registry, insecure, credential)
    return ImagePlatforms(pinned, await read_platforms(reg, ref.repository, ref.digest))


async def release_platforms(
    store: UpstreamStore,
    release: ReleaseRecord,
    image: str,
    sources: Sequence[UpstreamSource],
    client: httpx.AsyncClient,
    settings: PollSettings,
    clock: Clock | None = None,
) -> ImagePlatforms:
    """The platforms of a release's pinned image: as recorded for that digest, else read and recorded.

    A digest's manifest never changes, so what was read for it stands; a tag pushed again (an arm64
    build added later) resolves to a new digest and is read again.
    """
    if release.platforms is not None and release.platforms_image == image:
        return ImagePlatforms(image, release.platforms)
    found = await image_platforms(image, sources, client, settings, clock)
    store.record_platforms(release.source, release.tag, image, found.platforms)
    return found
