"""A simulated image registry: which image references exist and how their engine behaves.

Lanes pin engine images by digest, and "a pull of a digest the registry
does not have fails" is a case the executor must handle, so the simulated
Sparks pull from this registry instead of accepting any reference. Each
image carries a behaviour: the stand-in's environment switches
(`STANDIN_LOAD_S`, `STANDIN_NEVER_HEALTHY`, ...), so "the new vLLM build
never gets healthy" is one `add()` in a test. One registry is shared by the
whole simulated fleet, as one registry serves a real one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


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
        self._images: dict[tuple[str, str], SimImage] = {}
        self._tags: dict[tuple[str, str], str] = {}

    def add(self, ref: str, env: Mapping[str, str] | None = None, *, digest: str | None = None) -> SimImage:
        """Make `ref` pullable; a tag without a digest gets a stable made-up one."""
        parsed = ImageRef.parse(ref)
        chosen = parsed.digest or digest
        if chosen is None:
            chosen = "sha256:" + hashlib.sha256(str(parsed).encode()).hexdigest()
        if not _DIGEST.match(chosen):
            raise ValueError(f"not a sha256 digest: {chosen!r}")
        image = SimImage(repo=parsed.repo, digest=chosen, env=dict(env or {}))
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

    def resolve(self, ref: str) -> SimImage | None:
        """The image `ref` names, or None; a digest wins over a tag, as in docker."""
        try:
            parsed = ImageRef.parse(ref)
        except ValueError:
            return None
        digest = parsed.digest or self._tags.get((parsed.repo, parsed.tag or "latest"))
        return self._images.get((parsed.repo, digest)) if digest else None

    def knows_repo(self, repo: str) -> bool:
        return any(r == repo for r, _ in self._images)
