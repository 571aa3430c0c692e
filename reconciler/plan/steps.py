"""Steps of a plan: frozen data the executor interprets.

A plan is data so it can be printed (`lanes plan`), journaled before it
runs, compared in table tests, and proven idempotent: planning again from
the state an applied plan produced gives no steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from reconciler.engines import ContainerSpec

LaneAction = Literal["deploy", "stop", "noop", "denied", "blocked", "fail"]
"""`blocked`: cannot act now (host unreachable, leased); `fail`: cannot work as written (model missing)."""


@dataclass(frozen=True)
class HostContainer:
    host: str
    name: str


@dataclass(frozen=True)
class AcquireLeases:
    hosts: tuple[str, ...]
    kind: str = "lease"

    def describe(self) -> str:
        return f"lease {', '.join(self.hosts)}"


@dataclass(frozen=True)
class PullImages:
    pulls: tuple[tuple[str, str], ...]  # (host, image)
    kind: str = "pull"

    def describe(self) -> str:
        images = sorted({image for _, image in self.pulls})
        return f"pull {', '.join(images)} on {len(self.pulls)} host(s)"


@dataclass(frozen=True)
class WriteEnvFiles:
    """Secrets reach a host as a 0600 file over stdin; the plan holds only names."""

    files: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...]  # (host, path, ((env, secret name), ...))
    kind: str = "env-files"

    def describe(self) -> str:
        return f"write env files on {', '.join(h for h, _, _ in self.files)}"


@dataclass(frozen=True)
class StopContainers:
    containers: tuple[HostContainer, ...]
    reason: str
    kind: str = "stop"

    def describe(self) -> str:
        names = ", ".join(f"{c.name}@{c.host}" for c in self.containers)
        return f"stop {names} ({self.reason})"


@dataclass(frozen=True)
class DropCaches:
    hosts: tuple[str, ...]
    kind: str = "drop-caches"

    def describe(self) -> str:
        return f"drop page cache on {', '.join(self.hosts)}"


@dataclass(frozen=True)
class StartRanks:
    """Ranks that start together (one engine start group)."""

    ranks: tuple[tuple[str, ContainerSpec], ...]  # (host, spec)
    kind: str = "start"

    def describe(self) -> str:
        return "start " + ", ".join(f"{spec.name}@{host}" for host, spec in self.ranks)


@dataclass(frozen=True)
class WaitReady:
    """The head's readiness gate; the executor resolves where the head answers (its transport target)."""

    host: str
    port: int
    served_model: str
    kind: str = "wait-ready"

    def describe(self) -> str:
        return f"wait until {self.served_model} answers on {self.host}:{self.port}"


Step = AcquireLeases | PullImages | WriteEnvFiles | StopContainers | DropCaches | StartRanks | WaitReady


@dataclass(frozen=True)
class LanePlan:
    lane: str
    action: LaneAction
    reason: str
    steps: tuple[Step, ...] = ()
    fingerprint: str | None = None
    """Identifies the desired rank specs; a failed fingerprint is not retried."""
    specs: tuple[tuple[str, ContainerSpec], ...] = ()
    hosts: tuple[str, ...] = ()
    commit: str = ""

    @property
    def changes(self) -> bool:
        return bool(self.steps)


@dataclass(frozen=True)
class Plan:
    commit: str
    lanes: tuple[LanePlan, ...] = field(default_factory=tuple)

    @property
    def empty(self) -> bool:
        return not any(lp.changes for lp in self.lanes)

    def lane(self, name: str) -> LanePlan | None:
        return next((lp for lp in self.lanes if lp.lane == name), None)

    def with_changes(self) -> list[LanePlan]:
        return [lp for lp in self.lanes if lp.changes]
