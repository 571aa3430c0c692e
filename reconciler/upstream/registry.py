"""Talk to an OCI registry (Docker Hub, GHCR, NGC, any distribution-API registry): auth and digests.

Lanes pin images by digest, so what matters about a tag is the digest a
`docker pull` on an arm64 Spark resolves: the manifest is asked for with the
index and manifest-list media types first in `Accept`, so the registry
answers with the multi-arch index digest rather than one platform's
manifest. The digest comes from `Docker-Content-Digest` on a HEAD (which
Docker Hub does not count as a pull); a registry that omits the header gets
a GET and the body is hashed, which is what the digest is by definition.
Auth follows the distribution token flow: a 401 names a realm, service and
scope in `WWW-Authenticate`; a token is fetched there (anonymously, or with
the credential's user:password) and the request is sent again. A credential
goes only where the daemon's settings allow it (`Credential.allows`): https
to a declared host, for the registry and for the realm it names alike; a
registry that names a realm elsewhere gets nothing.
"""

from __future__ import annotations

import base64
import hashlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

from reconciler.errors import PermanentError, TransientError
from reconciler.spec.upstream import OCIRepository, UpstreamSource
from reconciler.upstream.base import Clock, Credential, PollSettings, Requester
from reconciler.upstream.base import credential_for as _declared_for
from reconciler.upstream.bounded import answer_json
from reconciler.upstream.store import UpstreamStore

MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
ACCEPT = ", ".join(MANIFEST_TYPES)
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
DOCKER_HUB = "registry-1.docker.io"
_HUB_ALIASES = {"docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"}
_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class ImageReference:
    """`[registry/]repository[:tag][@digest]`, with Docker Hub's implicit host and `library/`."""

    written: str
    """The name as written, without tag or digest: what a pinned reference keeps."""
    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, ref: str) -> ImageReference:
        name, _, digest = ref.partition("@")
        slash, colon = name.rfind("/"), name.rfind(":")
        tag = None
        if colon > slash:
            name, tag = name[:colon], name[colon + 1 :]
        if not name or tag == "" or (digest and not DIGEST_RE.match(digest)):
            raise PermanentError(f"'{ref}' is not an image reference")
        first, _, rest = name.partition("/")
        if rest and ("." in first or ":" in first or first == "localhost"):
            registry, repository = first, rest
        else:
            registry, repository = DOCKER_HUB, name
        if registry in _HUB_ALIASES:
            registry = DOCKER_HUB
            if "/" not in repository:
                repository = f"library/{repository}"
        return cls(name, registry, repository, tag, digest or None)

    def pinned(self, digest: str) -> str:
        return f"{self.written}@{digest}"


def same_registry(a: str, b: str) -> bool:
    return a == b or (a in _HUB_ALIASES and b in _HUB_ALIASES)


@dataclass
class RegistryClient:
    """One registry: its base URL, the token flow, and a token cache per scope."""

    requester: Requester
    registry: str
    insecure: bool = False
    credential: Credential | None = None
    """`user:password` (NGC: `$oauthtoken:<key>`) for the token realm; without a colon, a bearer token."""
    _tokens: dict[str, tuple[str, float, bool]] = field(default_factory=dict)
    """scope -> (Authorization value, expiry, whether it came from the credential)."""

    @property
    def base(self) -> str:
        return registry_base(self.registry, self.insecure)

    @property
    def secret(self) -> str | None:
        return self.credential.value if self.credential is not None else None

    async def request(
        self,
        method: str,
        url: str | httpx.URL,
        repository: str,
        accept: str | None = None,
        extra: dict[str, str] | None = None,
    ) -> httpx.Response:
        scope = f"repository:{repository}:pull"
        response = await self.requester.send(method, url, {**self._headers(scope, accept, url), **(extra or {})})
        if response.status_code != 401:
            return response
        challenge = response.headers.get("www-authenticate", "")
        await self._authenticate(challenge, scope, url)
        response = await self.requester.send(method, url, {**self._headers(scope, accept, url), **(extra or {})})
        if response.status_code == 401:
            raise PermanentError(f"{self.registry}/{repository}: the registry refused the credentials (HTTP 401)")
        return response

    def _headers(self, scope: str, accept: str | None, url: str | httpx.URL) -> dict[str, str]:
        headers = {"Accept": accept} if accept else {}
        token = self._tokens.get(scope)
        fresh = token is not None and token[1] > time.monotonic()
        if token is not None and fresh and (not token[2] or (self.credential and self.credential.allows(url))):
            headers["Authorization"] = token[0]
        return headers

    def _may_send(self, url: str | httpx.URL) -> None:
        if self.credential is not None and not self.credential.allows(url):
            raise PermanentError(f"{self.registry}: {self.credential.refusal(url)}")

    async def _authenticate(self, challenge: str, scope: str, url: str | httpx.URL) -> None:
        scheme, _, params_text = challenge.strip().partition(" ")
        params = dict(_CHALLENGE_PARAM.findall(params_text))
        secret = self.secret
        if scheme.lower() == "basic":
            if not secret or ":" not in secret:
                raise PermanentError(f"{self.registry}: the registry asks for a user and password; none configured")
            self._may_send(url)
            encoded = base64.b64encode(secret.encode()).decode()
            self._tokens[scope] = (f"Basic {encoded}", time.monotonic() + 3600, True)
            return
        if scheme.lower() != "bearer" or "realm" not in params:
            raise PermanentError(f"{self.registry}: unsupported authentication challenge '{scheme or '(none)'}'")
        if secret and ":" not in secret:
            self._may_send(url)
            self._tokens[scope] = (f"Bearer {secret}", time.monotonic() + 3600, True)
            return
        realm = httpx.URL(params["realm"])
        query = {"service": params.get("service", ""), "scope": params.get("scope", scope)}
        auth = None
        if secret:
            self._may_send(realm)
            user, _, password = secret.partition(":")
            auth = httpx.BasicAuth(user, password)
        url = realm.copy_merge_params({k: v for k, v in query.items() if v})
        response = await self.requester.send("GET", url, auth=auth)
        if response.status_code != 200:
            raise PermanentError(f"{self.registry}: token request refused (HTTP {response.status_code})")
        body = answer_json(response, f"{self.registry}: token realm")
        token = (body.get("token") or body.get("access_token")) if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise PermanentError(f"{self.registry}: token answer holds no token")
        lifetime = body.get("expires_in", 60)
        lifetime = lifetime if isinstance(lifetime, int) and lifetime > 0 else 60
        entry = (f"Bearer {token}", time.monotonic() + max(30, lifetime - 10), bool(secret))
        self._tokens[params.get("scope", scope)] = entry
        self._tokens[scope] = entry


async def manifest_digest(reg: RegistryClient, repository: str, reference: str) -> str | None:
    """The digest a pull of `repository:reference` resolves to (multi-arch index first); None if absent."""
    url = f"{reg.base}/v2/{repository}/manifests/{reference}"
    response = await reg.request("HEAD", url, repository, ACCEPT)
    if response.status_code == 404:
        return None
    digest = str(response.headers.get("docker-content-digest", "")).strip()
    if response.status_code == 200 and DIGEST_RE.match(digest):
        return digest
    if response.status_code not in (200, 405):
        raise_for(response, f"{reg.registry}/{repository}:{reference}")
    # No digest header (or HEAD not allowed): the digest is the sha256 of the manifest bytes.
    response = await reg.request("GET", url, repository, ACCEPT)
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise_for(response, f"{reg.registry}/{repository}:{reference}")
    return "sha256:" + hashlib.sha256(response.content).hexdigest()


def raise_for(response: httpx.Response, what: str) -> None:
    code = response.status_code
    if code in (403, 404):
        raise PermanentError(f"{what}: HTTP {code}")
    raise TransientError(f"{what}: HTTP {code}")


def registry_base(registry: str, insecure: bool) -> str:
    host = DOCKER_HUB if registry in _HUB_ALIASES else registry
    return f"{'http' if insecure else 'https'}://{host}"


def credential_for(settings: PollSettings, name: str | None, registry: str, insecure: bool) -> Credential | None:
    """The declared credential that may go to this registry (see `base.credential_for`)."""
    return _declared_for(settings, name, registry_base(registry, insecure) + "/v2/")


def source_for(registry: str, repository: str, sources: Sequence[UpstreamSource]) -> OCIRepository | None:
    """The OCI source of upstreams.yaml for that repository, else one on the same registry (its credentials)."""
    oci = [s for s in sources if isinstance(s, OCIRepository) and same_registry(s.registry, registry)]
    exact = [s for s in oci if s.repository == repository]
    found = exact or oci
    return found[0] if found else None


async def resolve_image(
    reference: str,
    sources: Sequence[UpstreamSource],
    client: httpx.AsyncClient,
    settings: PollSettings,
    clock: Clock | None = None,
    store: UpstreamStore | None = None,
) -> str:
    """`repo:tag` -> `repo@sha256:...`: from a recorded OCI poll of that tag, else one manifest HEAD.

    Plain HTTP and credentials come from the OCI source in upstreams.yaml
    that names the same registry (`insecure: true` for a local registry).
    """
    ref = ImageReference.parse(reference)
    if ref.digest:
        return ref.pinned(ref.digest)
    tag = ref.tag or "latest"
    source = source_for(ref.registry, ref.repository, sources)
    if store is not None and source is not None and source.repository == ref.repository:
        recorded = store.release(source.name, tag)
        if recorded is not None and recorded.digest:
            return ref.pinned(recorded.digest)
    requester = Requester(client, settings, clock or Clock())
    insecure = bool(source and source.insecure)
    credential = credential_for(settings, source.token_credential if source else None, ref.registry, insecure)
    reg = RegistryClient(requester, ref.registry, insecure, credential)
    digest = await manifest_digest(reg, ref.repository, tag)
    if digest is None:
        raise TransientError(f"{ref.registry}/{ref.repository}:{tag} is not in the registry (yet)")
    return ref.pinned(digest)
