"""Steps of a plan: frozen data the executor interprets.

A plan is data so it can be printed (`lanes plan`), journaled before it
runs, compared in table tests, and proven idempotent: planning again from
the state an applied plan produced gives no steps.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from reconciler.engines import ContainerSpec
from reconciler.spec.manifest import Manifest

LaneAction = Literal["deploy", "verify", "stop", "noop", "denied", "blocked", "fail", "suspended"]
"""`verify`: the desired ranks run but their readiness was never observed, so they are gated again;
`blocked`: cannot act now (host unreachable, leased, a retry pending, a change window closed);
`fail`: cannot work as written; `suspended`: the lane file says hands off, so what runs is left as it is."""


class Cause(StrEnum):
    """Why a lane is planned as it is: the typed reason beside the sentence for people."""

    IN_SYNC = "in-sync"
    NOTHING_RUNS = "nothing-runs"
    FIRST_DEPLOY = "first-deploy"
    SPEC_CHANGED = "spec-changed"
    DRIFT = "drift"
    UNVERIFIED = "unverified"
    LANE_STOPPED = "lane-stopped"
    LANE_REMOVED = "lane-removed"
    DENIED = "denied"
    UNREACHABLE = "unreachable"
    LEASE_HELD = "lease-held"
    CONDEMNED = "condemned"
    BACKOFF = "backoff"
    MODEL_MISSING = "model-missing"
    HOST_FACTS = "host-facts"
    """A rank host's data plane cannot carry the lane now (a link down, an address or a RoCE GID missing)."""
    INTERNAL_ERROR = "internal-error"
    SUSPENDED = "suspended"
    """The lane file says `suspended: true`: nothing is applied, repaired or rolled back."""
    CHANGE_WINDOW = "change-window"
    """A change that restarts the running lane waits for one of its change windows to open."""
    SWAP_HELD = "swap-held"
    """A swap of hosts failed and was rolled back: the giving lane serves on, the taking lanes wait, until the
    failed lane's spec changes, `lanes retry` clears it, or its retry is due."""
    RESTORED_DRIFT = "restored-drift"
    """The desired spec is held back after it failed (condemned, or waiting out a backoff) and the last healthy
    spec, which serves in its place, drifted (a rank missing, exited): that spec is put back as it was, and
    gated where it passed its gate before; never the held one."""


class RolloutKind(StrEnum):
    """How a routed lane's change reaches its clients."""

    BLUE_GREEN = "blue-green"
    """The new spec starts on other, free Sparks; the route moves once it passed its gate; the old ranks stop
    after a watch window."""
    REPLICA = "one-replica-at-a-time"
    """Another lane serves the model meanwhile: this one is drained, swapped, gated and routed again."""
    IN_PLACE = "in-place"
    """Nothing else can serve the model: the gateway answers 503 with Retry-After while the engine loads."""


@dataclass(frozen=True)
class Rollout:
    kind: RolloutKind
    model: str
    why: str
    away_s: float | None = None
    """In place: how long the model is expected to be away (the lane's last measured start); None: unknown."""

    def describe(self) -> str:
        text = f"{self.kind.value} for {self.model}: {self.why}"
        if self.kind is RolloutKind.IN_PLACE:
            away = f"about {self.away_s:.0f} s" if self.away_s is not None else "for one engine load (never measured)"
            text += f"; the model is away {away}, answered 503 with Retry-After meanwhile"
        return text

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind.value, "model": self.model, "why": self.why, "away_s": self.away_s}


class DriftKind(StrEnum):
    """How one rank on one host differs from the desired spec."""

    MISSING = "missing"
    STOPPED = "stopped"
    OTHER_SPEC = "other-spec"
    OTHER_IMAGE = "other-image"
    UNWANTED = "unwanted"
    UNMANAGED_ON_PORT = "unmanaged-on-port"


@dataclass(frozen=True)
class Drift:
    """One difference between what runs and what should, named so a person can find it on the host."""

    kind: DriftKind
    host: str
    container: str
    detail: str = ""

    def describe(self) -> str:
        what = {
            DriftKind.MISSING: "missing",
            DriftKind.STOPPED: f"not running ({self.detail})",
            DriftKind.OTHER_SPEC: f"runs another spec ({self.detail})",
            DriftKind.OTHER_IMAGE: f"runs another image ({self.detail})",
            DriftKind.UNWANTED: "no longer wanted",
            DriftKind.UNMANAGED_ON_PORT: f"is not lanes' and holds the lane's port {self.detail}",
        }[self.kind]
        return f"{self.container} {what} on {self.host}"

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.value, "host": self.host, "container": self.container, "detail": self.detail}


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
    needs: tuple[str, ...] = ()
    """What the image must hold to launch the lane, checked after each pull (`engines.launcher`)."""
    host_cuda: tuple[tuple[str, str], ...] = ()
    """(host, CUDA version its driver supports) as the probe saw it: the pulled image's requirement must fit."""

    def describe(self) -> str:
        images = sorted({image for _, image in self.pulls})
        checked = f", checked for {', '.join(self.needs)}" if self.needs else ""
        return f"pull {', '.join(images)} on {len(self.pulls)} host(s){checked}"


@dataclass(frozen=True)
class StageModel:
    """Before anything stops: every rank host holds the model's manifest exactly, copied from its origin
    where a file is missing or wrong (`reconciler.execute.staging`); a host that holds it only checks."""

    model: str
    path: str
    """The model's folder on every rank host."""
    hosts: tuple[str, ...]
    origin: tuple[str | None, str | None, bool]
    """(origin host or None for the control node, folder there or None for the model's path, host is a Spark)."""
    manifest: Manifest
    data_plane: tuple[tuple[str, str], ...] = ()
    """(host, its first data-plane address without prefix) of the hosts that have one: Sparks feed each other there."""
    kind: str = "stage"

    def describe(self) -> str:
        host, folder, _ = self.origin
        source = f"{folder} on the control node" if host is None else f"{host}:{folder or self.path}"
        size = self.manifest.total_bytes / (1 << 30)
        return (
            f"stage model {self.model} ({len(self.manifest.files)} files, {size:,.1f} GiB) into {self.path} on "
            f"{', '.join(self.hosts)} from {source}, checked before anything stops"
        )


@dataclass(frozen=True)
class WriteEnvFiles:
    """Secrets reach a host as a 0600 file over stdin; the plan holds only names."""

    files: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...]  # (host, path, ((env, secret name), ...))
    kind: str = "env-files"

    def describe(self) -> str:
        return f"write env files on {', '.join(h for h, _, _ in self.files)}"


@dataclass(frozen=True)
class RemoveEnvFiles:
    """Env files no rank needs any more (the lane stopped, or its new ranks run without them) go.

    A stop removes its ranks' files; a deploy removes, once the new ranks passed their gate, the files
    of old ranks that the new spec does not write (a secret dropped, a rank moved off a host). Until
    then a rollback may start the old ranks again, which read them. Removing is best effort: a failure
    is said, and changes nothing else.
    """

    files: tuple[tuple[str, str], ...]  # (host, path)
    kind: str = "env-files-remove"

    def describe(self) -> str:
        hosts = ", ".join(sorted({h for h, _ in self.files}))
        return f"remove env files no rank needs on {hosts}"


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
class WaitGpuFree:
    """Before any rank starts: wait until no process outside a running lane holds each rank host's GPU."""

    hosts: tuple[str, ...]
    kind: str = "gpu-free"

    def describe(self) -> str:
        return f"wait until the GPU is free on {', '.join(self.hosts)}"


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


@dataclass(frozen=True)
class Drain:
    """Take the lane out of its model's route and wait, up to `timeout_s`, until its requests in flight end."""

    model: str
    host: str
    port: int
    timeout_s: float
    kind: str = "drain"

    def describe(self) -> str:
        where = f"{self.host}:{self.port}"
        return f"take {where} out of {self.model}'s route; wait up to {self.timeout_s:g} s for its requests"


@dataclass(frozen=True)
class Watch:
    """Blue/green: the new head takes the model's traffic for `window_s`, while the old ranks still run; more
    than `max_error_rate` of its requests failing (once `min_requests` were seen) sends the traffic back."""

    model: str
    host: str
    port: int
    window_s: float
    max_error_rate: float
    min_requests: int
    served_model: str = ""
    old_host: str = ""
    old_port: int = 0
    """Where the old spec serves now: the pre-promotion benchmark measures it beside the new head."""
    max_slowdown: float | None = None
    """The pre-promotion analysis: how much slower the new head may be (None: no analysis)."""
    drain_s: float = 60.0
    """An abort drains the new head this long at most before its ranks stop (the gateway's figures)."""
    max_ttft_s: float | None = None
    """The longest a first token of the new engine may take in the window (asked of it directly); None: not judged."""
    kind: str = "watch"

    def describe(self) -> str:
        return (
            f"route {self.model} to {self.host}:{self.port} and watch it {self.window_s:g} s "
            f"(back to the old lane if over {self.max_error_rate:.0%} of its requests fail)"
        )


Step = (
    AcquireLeases
    | PullImages
    | StageModel
    | WriteEnvFiles
    | StopContainers
    | DropCaches
    | WaitGpuFree
    | StartRanks
    | WaitReady
    | Drain
    | Watch
    | RemoveEnvFiles
)


@dataclass(frozen=True)
class Serving:
    """The spec a lane last passed its readiness gate with, as the journal recorded it: what serves while a
    failed desired spec is held back (after a rollback, or a failure before anything stopped)."""

    fingerprint: str
    specs: tuple[tuple[str, ContainerSpec], ...]
    gate: WaitReady
    """Where and how that spec passed its gate: its repair is gated there again."""
    commit: str | None = None
    """The commit it passed its gate at."""


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
    cause: Cause = Cause.IN_SYNC
    drift: tuple[Drift, ...] = ()
    """What differed on the hosts, when the lane is redeployed to repair drift (or left as it is, suspended)."""
    held_until: float | None = None
    """A change held by a change window: when the earliest of the lane's windows opens (epoch seconds)."""
    after: tuple[str, ...] = ()
    """Lanes of this plan that change and that this lane is applied after (its file's `after:`)."""
    rollout: Rollout | None = None
    """How a change of a lane the gateway routes reaches its clients (reconciler.plan.rollout), said in the plan."""
    per_host: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    """Each rank's own values (its file's `host_env`, engines/hostfacts.py), host by host in rank order, as
    `lanes plan` shows them: (host, ((variable, value), ...))."""

    @property
    def changes(self) -> bool:
        return bool(self.steps)


@dataclass(frozen=True)
class Swap:
    """Lanes that give up hosts (stopped) and lanes that take them (deployed) in one commit: one transaction.

    The giving lanes stop first; if a taking lane does not pass its gate, the taking lanes are stopped and
    the giving lanes started again on their last healthy spec, gated. The giving lanes' env files are
    removed only once every taking lane passed (`remove_env`): until then a rollback needs them.
    """

    giving: tuple[str, ...]
    taking: tuple[str, ...]
    hosts: tuple[str, ...]
    remove_env: tuple[tuple[str, str], ...] = ()  # (host, path)

    def describe(self) -> str:
        return f"swap {', '.join(self.hosts)}: {', '.join(self.giving)} -> {', '.join(self.taking)}"


@dataclass(frozen=True)
class Plan:
    commit: str
    lanes: tuple[LanePlan, ...] = field(default_factory=tuple)
    swaps: tuple[Swap, ...] = ()

    @property
    def empty(self) -> bool:
        return not any(lp.changes for lp in self.lanes)

    def lane(self, name: str) -> LanePlan | None:
        return next((lp for lp in self.lanes if lp.lane == name), None)

    def with_changes(self) -> list[LanePlan]:
        return [lp for lp in self.lanes if lp.changes]


def fingerprint(specs: Sequence[tuple[str, ContainerSpec]]) -> str:
    """A lane's rendered rank specs in 16 hex digits: what the journal says failed, passed or serves."""
    digest = hashlib.sha256()
    for host, spec in specs:
        digest.update(f"{host}\0{spec.name}\0{spec.spec_hash}\n".encode())
    return digest.hexdigest()[:16]
