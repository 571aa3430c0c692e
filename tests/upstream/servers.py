"""Local HTTP servers that answer as GitHub's releases API, a token-authenticated registry and a forge.

Each runs `http.server` in a thread on 127.0.0.1 and an ephemeral port, and
records every request (method, path, headers, body) so tests can count what
a poll cost and check what a proposal sent. No test reaches the internet.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
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


INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"


def index_manifest(seed: str) -> bytes:
    digest = "sha256:" + hashlib.sha256(seed.encode()).hexdigest()
    doc = {
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": digest,
                "size": 1234,
                "platform": {"architecture": "arm64", "os": "linux"},
            }
        ],
    }
    return json.dumps(doc, indent=2).encode()


class FakeRegistry:
    """A distribution-API registry behind the token flow (`WWW-Authenticate: Bearer realm=...`)."""

    def __init__(self, repos: dict[str, list[str]], *, user: str | None = None, password: str | None = None) -> None:
        self.manifests = {repo: {tag: index_manifest(f"{repo}:{tag}") for tag in tags} for repo, tags in repos.items()}
        self.user, self.password = user, password
        self.send_digest = True
        self.tokens: dict[str, str] = {}
        self.hub_remaining: str | None = None
        self.auth_requests: list[Request] = []

    def add(self, repo: str, tag: str) -> None:
        self.manifests.setdefault(repo, {})[tag] = index_manifest(f"{repo}:{tag}")

    def digest(self, repo: str, tag: str) -> str:
        return "sha256:" + hashlib.sha256(self.manifests[repo][tag]).hexdigest()

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
        else:
            return Reply.json(404, {"errors": [{"code": "NOT_FOUND"}]})
        auth = req.headers.get("authorization", "")
        if self.tokens.get(auth.removeprefix("Bearer ")) != f"repository:{repo}:pull":
            return self._challenge(req, repo)
        if repo not in self.manifests:
            return Reply.json(404, {"errors": [{"code": "NAME_UNKNOWN"}]})
        extra = (
            {"ratelimit-limit": "100;w=21600", "ratelimit-remaining": self.hub_remaining} if self.hub_remaining else {}
        )
        if kind == "tags":
            return self._tags(req, repo, extra)
        if ref not in self.manifests[repo]:
            return Reply.json(404, {"errors": [{"code": "MANIFEST_UNKNOWN"}]})
        accept = req.headers.get("accept", "")
        if INDEX not in accept or MANIFEST_LIST not in accept:
            return Reply.json(404, {"errors": [{"code": "MANIFEST_UNKNOWN", "message": "no index type accepted"}]})
        body = self.manifests[repo][ref]
        headers = {"Content-Type": INDEX, **extra}
        if self.send_digest:
            headers["Docker-Content-Digest"] = self.digest(repo, ref)
        return Reply(200, headers, body)

    def _tags(self, req: Request, repo: str, extra: dict[str, str]) -> Reply:
        tags = sorted(self.manifests[repo])
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

    def __call__(self, req: Request) -> Reply:
        prefix = "/repos" if self.kind == "github" else "/api/v1/repos"
        if req.path != f"{prefix}/{self.repo}/pulls":
            return Reply.json(404, {"message": "Not Found"})
        scheme = "Bearer" if self.kind == "github" else "token"
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
