"""What every upstream poller shares: settings, the clock, results, retries, rate limits, credentials.

Upstream APIs are someone else's servers with someone else's quotas. Each
poller must (1) spend as little of the quota as it can, (2) stop asking when
the server says so and remember that across restarts (the store keeps
`next_allowed`), and (3) ride out short outages without hammering (exponential
backoff with full jitter), and (4) send a credential only where the daemon's
settings allow it: the state repository may name a source's URL, never where
a token goes (`Credential`, `credential_for`). Those rules live here once, so the GitHub, OCI and
git pollers cannot each get them slightly wrong. The clock is injected so
tests run backoffs and rate-limit windows in virtual time.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import httpx
import structlog
from pydantic import BaseModel, ConfigDict, Field

from reconciler.cancel import raise_if_cancel_requested
from reconciler.errors import PermanentError, TransientError
from reconciler.upstream.bounded import ANSWER_DEADLINE_S, MAX_ANSWER_BYTES, read_bounded
from reconciler.upstream.store import PollState, UpstreamStore

log = structlog.get_logger(__name__)

USER_AGENT = "lanes-upstream-watch"
RETRY_STATUSES = frozenset({500, 502, 503, 504})
_CREDENTIAL_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")

PollStatus = Literal["new", "unchanged", "skipped", "rate-limited", "failed"]


class UpstreamCredential(BaseModel):
    """A token the operator declared (the daemon's `[upstream.credentials.<name>]`), and the hosts it may go to."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    file: Path = Field(description="the file holding the token (`user:password` for a registry's token realm)")
    hosts: tuple[str, ...] = Field(min_length=1, description="hosts (or host:port) the token may be sent to")


class PollSettings(BaseModel):
    """How the pollers behave; the daemon and `lanes upstream --refresh` pass one in."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data_dir: Path = Field(default=Path(".lanes/upstream"), description="git mirrors of git-head sources")
    credentials_dir: Path | None = Field(
        default=None, description="one file per credential name, for names the operator chose (push, forge)"
    )
    credentials: tuple[UpstreamCredential, ...] = Field(
        default=(), description="the only tokens a source of upstreams.yaml may use, each with its allowed hosts"
    )
    allow_insecure_hosts: tuple[str, ...] = Field(
        default=(), description="hosts a credential may reach over plain http (loopback test servers only)"
    )
    timeout_s: float = Field(default=30.0, gt=0)
    attempts: int = Field(default=3, ge=1, description="tries of one request on 5xx or network errors")
    retry_base_s: float = Field(default=1.0, gt=0, description="first wait between tries of one request")
    backoff_base_s: float = Field(default=60.0, gt=0, description="first wait after a failed poll")
    backoff_cap_s: float = Field(default=3600.0, gt=0, description="longest wait between failed polls")
    page_size: int = Field(default=100, ge=1, le=100)
    max_pages: int = Field(default=20, ge=1, description="a bound on pagination, against a looping Link")
    max_digests_per_poll: int = Field(default=50, ge=1, description="manifest HEADs of new tags per OCI poll")
    max_subjects: int = Field(default=200, ge=1, description="commit subjects kept per new git head")
    secondary_wait_s: float = Field(default=60.0, gt=0, description="wait after a 429 that names no reset")
    concurrency: int = Field(default=4, ge=1)
    max_answer_bytes: int = Field(
        default=MAX_ANSWER_BYTES, ge=1024, description="largest answer body read from an upstream (decoded)"
    )
    answer_deadline_s: float = Field(
        default=ANSWER_DEADLINE_S, gt=0, description="time to read one answer body whole (against a slow drip)"
    )


@dataclass
class Clock:
    """Wall time, sleeping and randomness, swappable for virtual time in tests."""

    now: Callable[[], float] = time.time
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    rng: random.Random = field(default_factory=random.Random)


@dataclass(frozen=True)
class PollResult:
    """What one poll of one source did; `requests` counts what it cost the upstream."""

    source: str
    kind: str
    status: PollStatus
    new: tuple[str, ...] = ()
    requests: int = 0
    next_allowed: float | None = None
    error: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "source": self.source,
            "kind": self.kind,
            "status": self.status,
            "new": list(self.new),
            "requests": self.requests,
            "next_allowed": self.next_allowed,
            "error": self.error,
        }

    def describe(self) -> str:
        if self.status == "new":
            shown = ", ".join(self.new[:5]) + (f" and {len(self.new) - 5} more" if len(self.new) > 5 else "")
            what = f"{len(self.new)} new ({shown})"
        elif self.status == "skipped":
            what = f"skipped: rate limited until {_stamp(self.next_allowed)}"
        elif self.status == "rate-limited":
            what = f"rate limited until {_stamp(self.next_allowed)}"
        elif self.status == "failed":
            what = f"failed: {self.error}"
        else:
            what = "unchanged"
        return f"{self.source} ({self.kind}): {what}, {self.requests} request(s)"


def _stamp(when: float | None) -> str:
    if when is None:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(when))


def read_credential(directory: Path | None, name: str) -> str:
    """A token from its file (systemd LoadCredential style); the value never leaves the caller."""
    if not _CREDENTIAL_NAME.match(name):
        raise PermanentError(f"credential name '{name}' is not a plain name")
    if directory is None:
        raise PermanentError(f"credential '{name}' is needed but no credentials directory is configured")
    return _read_token(directory / name, name)


def _host_keys(url: httpx.URL) -> set[str]:
    host = url.host.lower()
    return {host, f"{host}:{url.port}"} if url.port else {host}


@dataclass(frozen=True)
class Credential:
    """A declared token and where it may go: https to one of its hosts (plain http only to an allowed test host)."""

    name: str
    value: str = field(repr=False)
    hosts: frozenset[str]
    insecure_hosts: frozenset[str] = frozenset()

    def host_allowed(self, url: str | httpx.URL) -> bool:
        return bool(_host_keys(httpx.URL(str(url))) & self.hosts)

    def allows(self, url: str | httpx.URL) -> bool:
        """Whether this token may be sent with a request to `url`."""
        parsed = httpx.URL(str(url))
        if not _host_keys(parsed) & self.hosts:
            return False
        if parsed.scheme == "https":
            return True
        return parsed.scheme == "http" and bool(_host_keys(parsed) & self.insecure_hosts)

    def refusal(self, url: str | httpx.URL) -> str:
        parsed = httpx.URL(str(url))
        where = _public(parsed)
        if not self.host_allowed(parsed):
            allowed = ", ".join(sorted(self.hosts))
            return f"credential '{self.name}' may not be sent to {parsed.host} (the daemon's settings allow {allowed})"
        return f"credential '{self.name}' is not sent over plain {parsed.scheme} ({where}); https only"


def credential_for(settings: PollSettings, name: str | None, url: str | httpx.URL) -> Credential | None:
    """The token to send to `url`, from the operator's declarations only.

    `name` is what upstreams.yaml asks for (`token_credential`): it must be a
    declared credential that may go to `url`'s host over https, else the
    poll fails and nothing is sent. Without a name, the first declared
    credential that may go to `url` is used, and none is no token.
    """
    declared = [c for c in settings.credentials if name is None or c.name == name]
    if name is not None and not declared:
        raise PermanentError(
            f"credential '{name}' is not declared in the daemon's settings ([upstream.credentials.{name}]); not sent"
        )
    insecure = frozenset(h.lower() for h in settings.allow_insecure_hosts)
    for item in declared:
        candidate = Credential(item.name, "", frozenset(h.lower() for h in item.hosts), insecure)
        if candidate.allows(url):
            return replace(candidate, value=_read_token(item.file, item.name))
        if name is not None:
            raise PermanentError(candidate.refusal(url))
    return None


def _read_token(path: Path, name: str) -> str:
    try:
        value = path.read_text().strip()
    except OSError as exc:
        raise PermanentError(f"credential '{name}' cannot be read from {path}: {exc.strerror}") from None
    if not value:
        raise PermanentError(f"credential '{name}' in {path} is empty")
    return value


def backoff_delay(failures: int, base: float, cap: float, rng: random.Random) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2^failures)] (spreads the retries of many pollers)."""
    return rng.uniform(0, min(cap, base * (2 ** max(0, failures))))


def _retry_after(value: str, now: float) -> float | None:
    value = value.strip()
    if value.isdigit():
        return now + int(value)
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return parsed.timestamp()


def rate_limited_until(response: httpx.Response, now: float, settings: PollSettings) -> float | None:
    """When the server says to stop asking, the time to ask again; None when it does not.

    GitHub: `retry-after` (secondary limits) or `x-ratelimit-remaining: 0` with
    `x-ratelimit-reset` (epoch seconds). Docker Hub: `ratelimit-remaining:
    0;w=21600` (the window in seconds; no reset is given, so the whole window
    is waited). A 429 that names nothing waits `secondary_wait_s`. A 403
    without any of these is a refusal, not a rate limit.
    """
    headers = response.headers
    if "retry-after" in headers and response.status_code in (403, 429, 503):
        until = _retry_after(headers["retry-after"], now)
        if until is not None:
            return max(until, now)
    if headers.get("x-ratelimit-remaining", "").strip() == "0":
        reset = headers.get("x-ratelimit-reset", "").strip()
        return max(float(reset), now) if reset.isdigit() else now + settings.secondary_wait_s
    hub = headers.get("ratelimit-remaining")
    if hub is not None:
        count, _, rest = hub.partition(";")
        if count.strip() == "0":
            window = re.search(r"w=(\d+)", rest)
            reset = headers.get("ratelimit-reset", "").strip()
            if reset.isdigit():
                return now + int(reset)
            return now + (int(window.group(1)) if window else settings.secondary_wait_s)
    if response.status_code == 429:
        return now + settings.secondary_wait_s
    return None


@dataclass
class Requester:
    """Sends requests with retries on 5xx and network errors, and counts them."""

    client: httpx.AsyncClient
    settings: PollSettings
    clock: Clock
    count: int = 0

    async def send(
        self,
        method: str,
        url: str | httpx.URL,
        headers: dict[str, str] | None = None,
        *,
        auth: httpx.Auth | None = None,
    ) -> httpx.Response:
        last = ""
        for attempt in range(self.settings.attempts):
            if attempt:
                await self.clock.sleep(
                    backoff_delay(attempt, self.settings.retry_base_s, self.settings.backoff_cap_s, self.clock.rng)
                )
            self.count += 1
            try:
                request = self.client.build_request(method, url, headers={"User-Agent": USER_AGENT, **(headers or {})})
                response = await self.client.send(request, auth=auth, stream=True)
            except httpx.TransportError as exc:
                raise_if_cancel_requested()
                last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                continue
            await read_bounded(response, self.settings.max_answer_bytes, self.settings.answer_deadline_s)
            if response.status_code in RETRY_STATUSES and "retry-after" not in response.headers:
                last = f"HTTP {response.status_code}"
                continue
            return response
        raise TransientError(f"{method} {_public(url)}: {last} after {self.settings.attempts} attempt(s)")


def failed(
    name: str,
    kind: str,
    store: UpstreamStore,
    state: PollState,
    error: str,
    requests: int,
    settings: PollSettings,
    clock: Clock,
) -> PollResult:
    """Record a failed poll and back off exponentially (with jitter) before the next one."""
    now = clock.now()
    failures = state.failures + 1
    until = now + backoff_delay(failures, settings.backoff_base_s, settings.backoff_cap_s, clock.rng)
    store.save_poll_state(replace(state, last_poll=now, next_allowed=until, failures=failures, last_error=error))
    log.warning(
        "upstream.poll_failed", source=name, kind=kind, error=error, failures=failures, retry_in_s=round(until - now, 1)
    )
    return PollResult(name, kind, "failed", requests=requests, next_allowed=until, error=error)


def mark_polled(store: UpstreamStore, state: PollState, now: float, until: float | None) -> None:
    """A poll that succeeded without new content: clear the failures, keep the ETag."""
    store.save_poll_state(replace(state, last_poll=now, next_allowed=until, failures=0, last_error=None))


def _public(url: str | httpx.URL) -> str:
    """The URL without query or credentials, for messages."""
    parsed = httpx.URL(str(url))
    return str(parsed.copy_with(query=None, userinfo=b""))
