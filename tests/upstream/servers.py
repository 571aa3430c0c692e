"""Local HTTP servers that answer as GitHub's releases API, a token-authenticated registry and a forge.

Each runs `http.server` in a thread on 127.0.0.1 and an ephemeral port, and
records every request (method, path, headers, body) so tests can count what
a poll cost and check what a proposal sent. No test reaches the internet.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit


@dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes = b""

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, str]:
        return {k: v[-1] for k, v in parse_qs(urlsplit(self.target).query).items()}

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    @classmethod
    def json(cls, status: int, value: Any, headers: dict[str, str] | None = None) -> Reply:
        return cls(status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(value).encode())


App = Callable[[Request], Reply]


class LocalServer:
    """A threaded HTTP server on 127.0.0.1:<ephemeral> delegating every request to `app`."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.requests: list[Request] = []
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                request = Request(self.command, self.path, headers, body)
                with lock:
                    outer.requests.append(request)
                reply = outer.app(request)
                self.send_response(reply.status)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                if self.command != "HEAD" and reply.status not in (204, 304):
                    self.wfile.write(reply.body)

            do_GET = do_HEAD = do_POST = _serve  # noqa: N815

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


class FakeGitHub:
    """`GET /repos/{owner}/{repo}/releases` with pages, ETags, 304s and quota headers, like api.github.com."""

    def __init__(self, repos: tuple[str, ...] = ("sgl-project/sglang",), token: str | None = None) -> None:
        self.releases: dict[str, list[dict[str, Any]]] = {r: [] for r in repos}
        self.token = token
        self.remaining = 5000
        self.reset = 1_900_000_000
        self.queued: list[Reply] = []
        """Replies served, in order, before normal handling (errors, rate limits)."""

    def add(self, repo: str, tag: str, published: str, *, draft: bool = False, prerelease: bool = False) -> None:
        self.releases[repo].insert(
            0,
            {
                "tag_name": tag,
                "name": tag,
                "draft": draft,
                "prerelease": prerelease,
                "created_at": published,
                "published_at": None if draft else published,
                "html_url": f"https://github.com/{repo}/releases/tag/{tag}",
                "body": f"notes of {tag}",
            },
        )

    def quota(self) -> dict[str, str]:
        return {
            "x-ratelimit-limit": "5000",
            "x-ratelimit-remaining": str(self.remaining),
            "x-ratelimit-reset": str(self.reset),
        }

    def __call__(self, req: Request) -> Reply:
        if self.queued:
            return self.queued.pop(0)
        if self.token is not None and req.headers.get("authorization") != f"Bearer {self.token}":
            return Reply.json(401, {"message": "Bad credentials"})
        repo = req.path.removeprefix("/repos/").removesuffix("/releases")
        if repo not in self.releases or not req.path.endswith("/releases"):
            return Reply.json(404, {"message": "Not Found"})
        per_page, page = int(req.query.get("per_page", 30)), int(req.query.get("page", 1))
        items = self.releases[repo][(page - 1) * per_page : page * per_page]
        etag = '"' + hashlib.sha1(json.dumps([items, per_page, page]).encode()).hexdigest() + '"'
        if req.headers.get("if-none-match") == etag:
            return Reply(304, {"ETag": etag, **self.quota()})  # a 304 costs no quota
        self.remaining -= 1
        headers = {"ETag": etag, **self.quota()}
        pages = max(1, -(-len(self.releases[repo]) // per_page))
        base = f"http://{req.headers['host']}/repos/{repo}/releases?per_page={per_page}"
        links = []
        if page < pages:
            links.append(f'<{base}&page={page + 1}>; rel="next"')
            links.append(f'<{base}&page={pages}>; rel="last"')
        if links:
            headers["Link"] = ", ".join(links)
        return Reply.json(200, items, headers)


# Media types as distribution/distribution names them (registry/handlers/manifests.go, manifest/schema2,
# manifest/manifestlist) and the OCI image spec (application/vnd.oci.image.*).
INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
MULTI_ARCH = ("linux/amd64", "linux/arm64")
ImageKind = Literal["oci-index", "docker-list", "oci-manifest", "docker-manifest"]


def _digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def _platform(text: str) -> dict[str, str]:
    """`linux/arm64/v8` -> the `platform` object of an index entry (os, architecture, variant)."""
    os_, arch, *variant = text.split("/")
    return {"architecture": arch, "os": os_, **({"variant": variant[0]} if variant else {})}


def _errors(status: int, code: str, message: str) -> Reply:
    """distribution's error body (registry/api/errcode): `{"errors": [{"code", "message"}]}`."""
    return Reply.json(status, {"errors": [{"code": code, "message": message}]})


class FakeRegistry:
    """A distribution-API registry behind the token flow (`WWW-Authenticate: Bearer realm=...`).

    Manifests are served as distribution's `GetManifest` serves them (registry/handlers/manifests.go in
    distribution/distribution): by tag or digest, HEAD and GET alike but HEAD without a body,
    `Content-Type` the manifest's own media type, `Docker-Content-Digest` and a quoted `Etag`, 304 on a
    matching `If-None-Match`; an OCI index or OCI manifest is MANIFEST_UNKNOWN (404) unless `Accept`
    names its type; a Docker manifest list asked for by tag without its type in `Accept` is answered
    with its linux/amd64 entry instead (the old-client fallback). Config blobs are under
    `/v2/<name>/blobs/<digest>`. Images are multi-arch OCI indexes unless `add` says otherwise.
    """

    def __init__(self, repos: dict[str, list[str]], *, user: str | None = None, password: str | None = None) -> None:
        self.blobs: dict[str, dict[str, tuple[str, bytes]]] = {}
        """Per repository, every manifest and config blob by digest: (media type, bytes)."""
        self.tags: dict[str, dict[str, str]] = {}
        for repo, tags in repos.items():
            self.blobs.setdefault(repo, {})
            self.tags.setdefault(repo, {})
            for tag in tags:
                self.add(repo, tag)
        self.user, self.password = user, password
        self.send_digest = True
        self.tokens: dict[str, str] = {}
        self.hub_remaining: str | None = None
        self.auth_requests: list[Request] = []

    def _put(self, repo: str, media_type: str, doc: dict[str, Any]) -> tuple[str, int]:
        body = json.dumps(doc, indent=2).encode()
        digest = _digest(body)
        self.blobs.setdefault(repo, {})[digest] = (media_type, body)
        return digest, len(body)

    def _image(self, repo: str, tag: str, platform: str, manifest_type: str) -> tuple[str, int]:
        """One platform's manifest and its config blob (architecture, os, variant as in the image spec)."""
        config_type = OCI_CONFIG if manifest_type == OCI_MANIFEST else DOCKER_CONFIG
        config = {**_platform(platform), "config": {"Labels": {"tag": tag}}, "rootfs": {"type": "layers"}}
        config_digest, config_size = self._put(repo, config_type, config)
        doc = {
            "schemaVersion": 2,
            "mediaType": manifest_type,
            "config": {"mediaType": config_type, "digest": config_digest, "size": config_size},
            "layers": [],
        }
        return self._put(repo, manifest_type, doc)

    def add(
        self, repo: str, tag: str, *, platforms: tuple[str, ...] = MULTI_ARCH, kind: ImageKind = "oci-index"
    ) -> str:
        """Push `repo:tag` (moving the tag if it exists); the digest a pull by tag resolves to."""
        if kind in ("oci-manifest", "docker-manifest"):
            (platform,) = platforms
            digest, _ = self._image(repo, tag, platform, OCI_MANIFEST if kind == "oci-manifest" else DOCKER_MANIFEST)
        else:
            index_type, entry_type = (INDEX, OCI_MANIFEST) if kind == "oci-index" else (MANIFEST_LIST, DOCKER_MANIFEST)
            entries = []
            for platform in platforms:
                digest, size = self._image(repo, tag, platform, entry_type)
                entries.append(
                    {"mediaType": entry_type, "digest": digest, "size": size, "platform": _platform(platform)}
                )
            if kind == "oci-index" and entries:
                # buildx adds an attestation manifest per image, listed as platform unknown/unknown
                # (docs.docker.com/build/metadata/attestations/attestation-storage).
                digest, size = self._put(repo, OCI_MANIFEST, {"schemaVersion": 2, "mediaType": OCI_MANIFEST})
                entries.append(
                    {
                        "mediaType": OCI_MANIFEST,
                        "digest": digest,
                        "size": size,
                        "annotations": {
                            "vnd.docker.reference.digest": entries[0]["digest"],
                            "vnd.docker.reference.type": "attestation-manifest",
                        },
                        "platform": {"architecture": "unknown", "os": "unknown"},
                    }
                )
            digest, _ = self._put(repo, index_type, {"schemaVersion": 2, "mediaType": index_type, "manifests": entries})
        self.tags.setdefault(repo, {})[tag] = digest
        return digest

    def digest(self, repo: str, tag: str) -> str:
        return self.tags[repo][tag]

    def body(self, repo: str, tag: str) -> bytes:
        return self.blobs[repo][self.tags[repo][tag]][1]

    def _challenge(self, req: Request, repo: str) -> Reply:
        realm = f"http://{req.headers['host']}/token"
        value = f'Bearer realm="{realm}",service="fake-registry",scope="repository:{repo}:pull"'
        return Reply.json(401, {"errors": [{"code": "UNAUTHORIZED"}]}, {"WWW-Authenticate": value})

    def _token(self, req: Request) -> Reply:
        self.auth_requests.append(req)
        if self.user is not None:
            expected = "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            if req.headers.get("authorization") != expected:
                return Reply.json(401, {"details": "incorrect username or password"})
        token = secrets.token_hex(8)
        self.tokens[token] = req.query.get("scope", "")
        return Reply.json(200, {"token": token, "access_token": token, "expires_in": 300})

    def __call__(self, req: Request) -> Reply:
        if req.path == "/token":
            return self._token(req)
        parts = req.path.removeprefix("/v2/")
        if "/tags/list" in parts:
            repo, kind, ref = parts.removesuffix("/tags/list"), "tags", ""
        elif "/manifests/" in parts:
            repo, _, ref = parts.partition("/manifests/")
            kind = "manifest"
        elif "/blobs/" in parts:
            repo, _, ref = parts.partition("/blobs/")
            kind = "blob"
        else:
            return _errors(404, "NOT_FOUND", "not found")
        auth = req.headers.get("authorization", "")
        if self.tokens.get(auth.removeprefix("Bearer ")) != f"repository:{repo}:pull":
            return self._challenge(req, repo)
        if repo not in self.tags:
            return _errors(404, "NAME_UNKNOWN", "repository name not known to registry")
        extra = (
            {"ratelimit-limit": "100;w=21600", "ratelimit-remaining": self.hub_remaining} if self.hub_remaining else {}
        )
        if kind == "tags":
            return self._tags(req, repo, extra)
        if kind == "blob":
            found = self.blobs[repo].get(ref)
            if found is None:
                return _errors(404, "BLOB_UNKNOWN", "blob unknown to registry")
            headers = {"Content-Type": "application/octet-stream", "Docker-Content-Digest": ref, **extra}
            return Reply(200, headers, found[1])
        return self._manifest(req, repo, ref, extra)

    def _manifest(self, req: Request, repo: str, ref: str, extra: dict[str, str]) -> Reply:
        """distribution's GetManifest, the branches that matter to a client (see the class docstring)."""
        accepted = {part.split(";")[0].strip() for part in req.headers.get("accept", "").split(",")}
        by_tag = not ref.startswith("sha256:")
        digest = self.tags[repo].get(ref) if by_tag else ref
        if digest is None or digest not in self.blobs[repo]:
            return _errors(404, "MANIFEST_UNKNOWN", "manifest unknown")
        if req.headers.get("if-none-match") in (digest, f'"{digest}"'):
            return Reply(304, {"Etag": f'"{digest}"', **extra})
        media_type, body = self.blobs[repo][digest]
        if media_type == OCI_MANIFEST and OCI_MANIFEST not in accepted:
            return _errors(
                404, "MANIFEST_UNKNOWN", "OCI manifest found, but accept header does not support OCI manifests"
            )
        if media_type == INDEX and INDEX not in accepted:
            return _errors(404, "MANIFEST_UNKNOWN", "OCI index found, but accept header does not support OCI indexes")
        if by_tag and media_type == MANIFEST_LIST and MANIFEST_LIST not in accepted:
            amd64 = [
                m["digest"]
                for m in json.loads(body)["manifests"]
                if m["platform"].get("architecture") == "amd64" and m["platform"].get("os") == "linux"
            ]
            if not amd64:
                return _errors(404, "MANIFEST_UNKNOWN", "manifest unknown")
            if DOCKER_MANIFEST not in accepted:
                return _errors(400, "MANIFEST_INVALID", "Schema 2 manifest not supported by client")
            digest = amd64[0]
            media_type, body = self.blobs[repo][digest]
        headers = {"Content-Type": media_type, "Etag": f'"{digest}"', **extra}
        if self.send_digest:
            headers["Docker-Content-Digest"] = digest
        return Reply(200, headers, body)

    def _tags(self, req: Request, repo: str, extra: dict[str, str]) -> Reply:
        tags = sorted(self.tags[repo])
        last = req.query.get("last")
        if last is not None:
            tags = [t for t in tags if t > last]
        n = int(req.query.get("n", 1000))
        page, more = tags[:n], len(tags) > n
        headers = dict(extra)
        if more:
            headers["Link"] = f'</v2/{repo}/tags/list?n={n}&last={page[-1]}>; rel="next"'
        return Reply.json(200, {"name": repo, "tags": page}, headers)


class FakeForge:
    """Pull requests on GitHub (`/repos/...`) or Gitea/Forgejo (`/api/v1/repos/...`)."""

    def __init__(self, kind: str, repo: str, token: str) -> None:
        self.kind, self.repo, self.token = kind, repo, token
        self.pulls: list[dict[str, Any]] = []
        self.posts: list[Request] = []

    def open_by_hand(self, branch: str, title: str, base: str = "main") -> dict[str, Any]:
        """A pull request a person opened from `branch` (the daemon finds it, never opens it)."""
        number = len(self.pulls) + 1
        pull = {
            "number": number,
            "state": "open",
            "title": title,
            "body": "",
            "head": {"ref": branch},
            "base": {"ref": base},
            "html_url": f"https://forge.example/{self.repo}/pulls/{number}",
            "comments": [],
        }
        self.pulls.append(pull)
        return pull

    def __call__(self, req: Request) -> Reply:
        prefix = "/repos" if self.kind == "github" else "/api/v1/repos"
        scheme = "Bearer" if self.kind == "github" else "token"
        comments = re.fullmatch(rf"{re.escape(prefix)}/{re.escape(self.repo)}/issues/(\d+)/comments", req.path)
        if comments is not None and req.method == "POST":
            if req.headers.get("authorization") != f"{scheme} {self.token}":
                return Reply.json(401, {"message": "Bad credentials"})
            pull = next((p for p in self.pulls if p["number"] == int(comments.group(1))), None)
            if pull is None:
                return Reply.json(404, {"message": "Not Found"})
            pull.setdefault("comments", []).append(req.json()["body"])
            url = f"{pull['html_url']}#issuecomment-{len(pull['comments'])}"
            return Reply.json(201, {"id": len(pull["comments"]), "html_url": url})
        if req.path != f"{prefix}/{self.repo}/pulls":
            return Reply.json(404, {"message": "Not Found"})
        if req.headers.get("authorization") != f"{scheme} {self.token}":
            return Reply.json(401, {"message": "Bad credentials"})
        if req.method == "GET":
            pulls = [p for p in self.pulls if p["state"] == "open"]
            head = req.query.get("head")
            if head is not None:
                pulls = [p for p in pulls if f"{self.repo.split('/')[0]}:{p['head']['ref']}" == head]
            return Reply.json(200, pulls)
        self.posts.append(req)
        body = req.json()
        number = len(self.pulls) + 1
        pull = {
            "number": number,
            "state": "open",
            "title": body["title"],
            "body": body["body"],
            "head": {"ref": body["head"]},
            "base": {"ref": body["base"]},
            "html_url": f"https://forge.example/{self.repo}/pulls/{number}",
        }
        self.pulls.append(pull)
        return Reply.json(201, pull)
