"""What the overview page shows, gathered in one place from what the daemon holds after its last cycle."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.facts.observed import ObservedFleet
from reconciler.spec.load import DesiredState
from reconciler.upstream.gap import GapRow


@dataclass(frozen=True)
class Snapshot:
    phase: str
    owner: str
    head: str | None
    rows: list[dict[str, Any]]
    """`reconciler.store.status.status_rows`: what `/status` and `lanes status` show per lane."""
    blocked: Mapping[str, str] = field(default_factory=dict)
    """Lanes the last cycle could not act on (a lease held elsewhere, a host unreachable), and why."""
    refused: Mapping[str, str] | None = None
    retry_at: Mapping[str, float] = field(default_factory=dict)
    """Lanes whose failed spec waits for its backoff, and until when (epoch seconds)."""
    desired: DesiredState | None = None
    check: Mapping[str, Any] | None = None
    """The last cycle's policy verdict as `lanes check --json` prints it (`Verdict.to_json`)."""
    observed: ObservedFleet | None = None
    """The last cycle's probe of every host."""
    gaps: list[GapRow] | None = None
    gap_error: str | None = None
    gateway: Mapping[str, Any] | None = None
    """The daemon's last gateway pass (`reconciler.daemon.gatewayjob.GatewayJob.last`); None: routes not kept."""
    now: float = 0.0
    """When the snapshot was taken (epoch seconds): a backoff that ended before it is due, not pending."""
