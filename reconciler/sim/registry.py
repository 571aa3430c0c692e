"""A simulated image registry: which image references exist and how their engine behaves.

Lanes pin engine images by digest, and "a pull of a digest the registry
does not have fails" is a case the executor must handle, so the simulated
Sparks pull from this registry instead of accepting any reference. Each
image carries a behaviour: the stand-in's environment switches
(`STANDIN_LOAD_S`, `STANDIN_NEVER_HEALTHY`, ...), so "the new vLLM build
never gets healthy" is one `add()` in a test. One registry is shared by the
whole simulated fleet, as one registry serves a real one.

A registry can also be down (`go_down()`): every pull then fails the way
docker reports it, with the registry's host named, until `come_back()`.
That is how "the registry went away in the middle of a pull" is staged:
the lane must fail before it stops an old rank, and converge once the
registry answers again.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from reconciler.sim.dockercli import CliError

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
DOCKER_HUB = "registry-1.docker.io"  # where docker pulls a repository named without a registry host

Outage = Literal["refused", "timeout", "503"]
"""How a registry is down: nothing listens, nothing answers, or its proxy answers 503."""


class RegistryUnavailableError(CliError):
    """A pull met a registry that is down: docker's exit 1 and its `Error response from daemon` line."""


def registry_host(repo: str) -> str:
    """The registry a repository lives on, as docker reads it: a first part with a dot or port, or Docker Hub."""
    first, slash, _ = repo.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first
    return DOCKER_HUB


def registry_path(repo: str) -> str:
    """A repository's path on its registry, as `docker pull` names it ("Pulling from lanes/standin")."""
    host = registry_host(repo)
    if host != DOCKER_HUB:
        return repo.split("/", 1)[1]
    return repo if "/" in repo else "library/" + repo


def _dialled(host: str) -> str:
    """What docker prints after `dial tcp`: the resolved address and port (a stable made-up one here)."""
    name, _, port = host.partition(":")
    if not re.fullmatch(r"[0-9.]+", name):
        # TEST-NET-3 (RFC 5737): a documentation address, never a real registry's.
        name = f"203.0.113.{int(hashlib.sha256(name.encode()).hexdigest(), 16) % 254 + 1}"
    return f"{name}:{port or 443}"


def outage_message(host: str, outage: Outage) -> str:
    """docker's words for a pull from a registry that is down, by the way it is down."""
    if outage == "503":
        return "Error response from daemon: received unexpected HTTP status: 503 Service Unavailable"
    if outage == "timeout":
        return (
            f'Error response from daemon: Get "https://{host}/v2/": net/http: request canceled while waiting '
            "for connection (Client.Timeout exceeded while awaiting headers)"
        )
    return (
        f'Error response from daemon: Get "https://{host}/v2/": dial tcp {_dialled(host)}: connect: connection refused'
    )


@dataclass(frozen=True)
class ImageRef:
    """A parsed reference: `repo[:tag][@sha256:...]`."""

    repo: str
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, ref: str) -> ImageRef:
        name, _, digest = ref.partition("@")
        # A colon after the last slash is a tag; one before it is a registry port.
        slash = name.rfind("/")
        colon = name.rfind(":")
        tag = None
        if colon > slash:
            name, tag = name[:colon], name[colon + 1 :]
        if not name or (digest and not _DIGEST.match(digest)) or tag == "":
            raise ValueError(f"invalid reference format: {ref!r}")
        return cls(repo=name, tag=tag, digest=digest or None)

    def __str__(self) -> str:
        text = self.repo + (f":{self.tag}" if self.tag else "")
        return text + (f"@{self.digest}" if self.digest else "")


@dataclass(frozen=True)
class SimImage:
    """One image in the registry: its manifest digest, local image id and behaviour env."""

    repo: str
    digest: str  # the manifest digest a lane pins (repo@sha256:...)
    env: Mapping[str, str] = field(default_factory=dict)
    lacks: frozenset[str] = frozenset()
    """Launchers the image does not hold (`vllm`, `ray`, `py:sglang`): every engine image has them all else."""

    @property
    def image_id(self) -> str:
        # Docker's image id is the config digest, not the manifest digest; the
        # sim derives a distinct, stable one so code cannot mix them up unnoticed.
        return "sha256:" + hashlib.sha256(("config:" + self.digest).encode()).hexdigest()

    @property
    def pinned(self) -> str:
        return f"{self.repo}@{self.digest}"


class SimRegistry:
    """Images by digest and tags pointing at digests, per repository."""

    def __init__(self, *, pull_delay_s: float = 0.0) -> None:
        self.pull_delay_s = pull_delay_s  # how long every pull takes, for timeout and parallelism tests
        self.unavailable: Outage | None = None
        """None while the registry answers; else how it is down (every pull fails, see `go_down`)."""
        self._images: dict[tuple[str, str], SimImage] = {}
        self._tags: dict[tuple[str, str], str] = {}

    def add(
        self,
        ref: str,
        env: Mapping[str, str] | None = None,
        *,
        digest: str | None = None,
        lacks: frozenset[str] = frozenset(),
    ) -> SimImage:
        """Make `ref` pullable; a tag without a digest gets a stable made-up one."""
        parsed = ImageRef.parse(ref)
        chosen = parsed.digest or digest
        if chosen is None:
            chosen = "sha256:" + hashlib.sha256(str(parsed).encode()).hexdigest()
        if not _DIGEST.match(chosen):
            raise ValueError(f"not a sha256 digest: {chosen!r}")
        image = SimImage(repo=parsed.repo, digest=chosen, env=dict(env or {}), lacks=lacks)
        self._images[(parsed.repo, chosen)] = image
        if parsed.tag:
            self._tags[(parsed.repo, parsed.tag)] = chosen
        return image

    def remove(self, ref: str) -> None:
        """Make `ref` unpullable (a deleted tag or a garbage-collected digest)."""
        parsed = ImageRef.parse(ref)
        if parsed.digest:
            self._images.pop((parsed.repo, parsed.digest), None)
        elif parsed.tag:
            self._tags.pop((parsed.repo, parsed.tag), None)

    def go_down(self, outage: Outage = "refused") -> None:
        """From now on every pull fails like a pull from a registry that is down (images already pulled stay)."""
        self.unavailable = outage

    def come_back(self) -> None:
        self.unavailable = None

    def resolve(self, ref: str) -> SimImage | None:
        """The image `ref` names, or None; a digest wins over a tag, as in docker.

        This is the registry's answer to a pull, so a registry that is down raises
        `RegistryUnavailableError` with the message docker prints (exit status 1).
        """
        try:
            parsed = ImageRef.parse(ref)
        except ValueError:
            return None
        if self.unavailable is not None:
            raise RegistryUnavailableError(outage_message(registry_host(parsed.repo), self.unavailable), 1)
        digest = parsed.digest or self._tags.get((parsed.repo, parsed.tag or "latest"))
        return self._images.get((parsed.repo, digest)) if digest else None

    def knows_repo(self, repo: str) -> bool:
        return any(r == repo for r, _ in self._images)
