"""Open pull requests for proposal branches: GitHub, and Gitea/Forgejo (which the team in the note uses).

A branch alone is easy to miss; a pull request puts the proposal, its
release notes and its policy verdict where reviewers already look. The two
APIs differ in path prefix and auth scheme only: GitHub
`POST /repos/{owner}/{repo}/pulls` with `Authorization: Bearer`, Gitea and
Forgejo `POST /api/v1/repos/{owner}/{repo}/pulls` with `Authorization:
token`. Before opening, open pull requests are listed and one for the same
branch is reused, so a retry never opens a second one.

A trial's comparison on a branch a person opened goes in as a comment on that
pull request: both forges file pull request comments under the issues API with
the pull request's number (GitHub "Create an issue comment", `POST
/repos/{owner}/{repo}/issues/{issue_number}/comments`; Gitea/Forgejo
`issueCreateComment`, `POST /api/v1/repos/{owner}/{repo}/issues/{index}/comments`),
body `{"body": markdown}`.
"""

from __future__ import annotations

from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field

from reconciler.errors import PermanentError, TransientError
from reconciler.upstream.bounded import answer_json


class ForgeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["github", "gitea"] = Field(description="gitea also covers Forgejo")
    api_url: str = Field(description="https://api.github.com, or the Gitea/Forgejo base URL (without /api/v1)")
    repo: str = Field(pattern=r"^[\w.-]+/[\w.-]+$", description="owner/name of the state repository on the forge")
    token_credential: str | None = Field(default=None, description="credential name holding the API token")


def _pulls_url(forge: ForgeSettings) -> str:
    base = forge.api_url.rstrip("/")
    if forge.kind == "github":
        return f"{base}/repos/{forge.repo}/pulls"
    return f"{base}/api/v1/repos/{forge.repo}/pulls"


_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def _headers(forge: ForgeSettings, token: str | None) -> dict[str, str]:
    url = httpx.URL(forge.api_url)
    if token and url.scheme != "https" and url.host not in _LOOPBACK:
        # A token goes over https only (a forge on loopback, as in tests, is the one exception).
        raise PermanentError(f"the forge token is not sent over plain {url.scheme} to {url.host}; use https")
    headers = {"Accept": "application/json"}
    if forge.kind == "github":
        headers["Accept"] = "application/vnd.github+json"
        headers["X-GitHub-Api-Version"] = "2022-11-28"
    if token:
        headers["Authorization"] = f"Bearer {token}" if forge.kind == "github" else f"token {token}"
    return headers


def _check(response: httpx.Response, what: str) -> Any:
    if response.status_code in (200, 201):
        return answer_json(response, what)
    if response.status_code >= 500:
        raise TransientError(f"{what}: the forge answered HTTP {response.status_code}")
    detail = response.text[:200].replace("\n", " ")
    raise PermanentError(f"{what}: the forge refused (HTTP {response.status_code}): {detail}")


async def find_pull(client: httpx.AsyncClient, forge: ForgeSettings, token: str | None, branch: str) -> str | None:
    """The URL of an open pull request from `branch`, if there is one."""
    found = await find_open_pull(client, forge, token, branch)
    return None if found is None else found[1]


async def find_open_pull(
    client: httpx.AsyncClient, forge: ForgeSettings, token: str | None, branch: str
) -> tuple[int, str] | None:
    """(number, web URL) of an open pull request from `branch`, if there is one."""
    params = {"state": "open"}
    if forge.kind == "github":
        params["head"] = f"{forge.repo.split('/')[0]}:{branch}"
        params["per_page"] = "100"
    else:
        params["limit"] = "50"
    try:
        response = await client.get(_pulls_url(forge), params=params, headers=_headers(forge, token))
    except httpx.TransportError as exc:
        raise TransientError(f"listing pull requests on {forge.api_url}: {type(exc).__name__}") from None
    pulls = _check(response, f"listing pull requests of {forge.repo}")
    for pull in pulls if isinstance(pulls, list) else []:
        head = pull.get("head") if isinstance(pull, dict) else None
        if isinstance(head, dict) and head.get("ref") == branch:
            url, number = pull.get("html_url"), pull.get("number")
            if isinstance(url, str) and isinstance(number, int):
                return number, url
    return None


async def comment_on_pull(
    client: httpx.AsyncClient, forge: ForgeSettings, token: str | None, number: int, body: str
) -> str:
    """Add `body` as a comment on pull request `number`; the comment's web URL."""
    base = forge.api_url.rstrip("/")
    prefix = base if forge.kind == "github" else f"{base}/api/v1"
    url = f"{prefix}/repos/{forge.repo}/issues/{number}/comments"
    try:
        response = await client.post(url, json={"body": body}, headers=_headers(forge, token))
    except httpx.TransportError as exc:
        raise TransientError(f"commenting on pull request {number} on {forge.api_url}: {type(exc).__name__}") from None
    created = _check(response, f"commenting on pull request {number} of {forge.repo}")
    link = created.get("html_url") if isinstance(created, dict) else None
    return link if isinstance(link, str) else ""


async def open_pull(
    client: httpx.AsyncClient,
    forge: ForgeSettings,
    token: str | None,
    *,
    title: str,
    head: str,
    base: str,
    body: str,
) -> str:
    """Open (or find the already open) pull request of `head` into `base`; its web URL."""
    existing = await find_pull(client, forge, token, head)
    if existing is not None:
        return existing
    payload = {"title": title, "head": head, "base": base, "body": body}
    try:
        response = await client.post(_pulls_url(forge), json=payload, headers=_headers(forge, token))
    except httpx.TransportError as exc:
        raise TransientError(f"opening a pull request on {forge.api_url}: {type(exc).__name__}") from None
    if response.status_code in (409, 422):  # already exists (a race with another opener)
        found = await find_pull(client, forge, token, head)
        if found is not None:
            return found
    created = _check(response, f"opening a pull request for {head}")
    url = created.get("html_url") if isinstance(created, dict) else None
    if not isinstance(url, str):
        raise PermanentError(f"opening a pull request for {head}: the forge's answer has no html_url")
    return url
