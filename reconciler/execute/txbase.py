"""What a lane transaction is made of: what its lane's transactions share, its own fields, how it journals.

Split from the transaction (`reconciler.execute.transaction`: its steps) and its endings
(`reconciler.execute.txendings`: success, failure, rollback, shutdown, preemption) so each module stays one
concept; the three are one class (`LaneTransaction`), built up in that order.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from reconciler.engines import ContainerSpec
from reconciler.execute.hostops import HostOps
from reconciler.execute.inflight import InFlight
from reconciler.execute.leases import Leases
from reconciler.execute.results import ExecutorConfig, LaneResult, ProgressFn, Result
from reconciler.execute.secrets import SecretStore
from reconciler.gateway.control import RouteControl
from reconciler.lane import (
    Event,
    LaneState,
)
from reconciler.plan.steps import (
    Cause,
    LanePlan,
    RolloutKind,
    Watch,
)
from reconciler.spec.lane import Health
from reconciler.store.journal import Store
from reconciler.store.lanewriter import record


@dataclass
class Shared:
    """What every transaction of one apply shares: the hosts, the journal, the leases."""

    ops: HostOps
    store: Store
    secrets: SecretStore
    config: ExecutorConfig
    progress: ProgressFn
    leases: Leases
    inflight: InFlight | None = None
    """The daemon's operations (None for `lanes apply`, which nothing preempts)."""
    routes: RouteControl | None = None
    """The gateway the daemon drives (None: no gateway, or `lanes apply`): drains and watches settle it."""


class StepNotDoneError(Exception):
    """A best-effort step did not get done: journaled and said, not a failure of the lane."""


class TxBase:
    def __init__(self, shared: Shared, lp: LanePlan, health: Health) -> None:
        self.s = shared
        self.lp = lp
        self.health = health
        self.run = shared.store.new_run()
        self.started = time.time()
        self.t0 = time.monotonic()
        self.held: list[str] = []
        self.started_ranks: list[tuple[str, ContainerSpec]] = []
        self.timings: dict[str, float] = {}
        self.touched = False
        self.before = shared.store.lane(lp.lane)
        self.drift = lp.drift if lp.cause in {Cause.DRIFT, Cause.RESTORED_DRIFT} else ()
        """What drifted, when repairing it is why this transaction runs (a new spec is not drift)."""
        self.beside = lp.rollout is not None and lp.rollout.kind is RolloutKind.BLUE_GREEN
        """Blue/green: the new ranks start beside the old ones, which serve until the watch passed."""
        self.started_beside = False
        self.watched: Watch | None = None
        """Blue/green's watch once it began: the new head has taken traffic, and an abort drains it first."""

    def _repairing(self, message: str) -> str:
        """A failed repair's message with what it repaired: the record's drift names repairs that passed only."""
        if not self.drift:
            return message
        return f"repairing {'; '.join(d.describe() for d in self.drift)}: {message}"

    def _record(self, *events: Event) -> None:
        """Events of this lane's transaction, handed to the one writer of lane state."""
        record(self.s.store, self.lp.lane, *events)

    def _end(
        self,
        result: Result,
        *events: Event,
        logs: dict[str, str] | None = None,
        timings: dict[str, float] | None = None,
        drift: dict[str, Any] | None = None,
    ) -> str | None:
        """How a transaction ends: its apply row, then the lane's state after `events`; returns its last error.

        In that order, so whoever sees the state's ending (`lanes status`, a test) finds the row that explains
        it, and a crash between the two loses no history (the record is still 'progressing' and the next
        resync gates the lane again)."""

        def journal(state: LaneState) -> None:
            self._journal(result, state.error.message if state.error else None, logs)

        state, _effects = record(self.s.store, self.lp.lane, *events, timings=timings, drift=drift, journal=journal)
        return state.error.message if state.error else None

    def _gate_deadline(self) -> float:
        """When the readiness gate gives up at the latest: its stages run one after another, each with its own
        timeout (reconciler.execute.readiness)."""
        h = self.health
        return time.time() + h.port_timeout_s + h.ready_timeout_s + h.models_timeout_s + h.completion_timeout_s

    def _journal(self, result: Result, error: str | None, logs: dict[str, str] | None = None) -> None:
        """The apply row (before the record: see `_end`)."""
        lp = self.lp
        drift = [d.to_json() for d in self.drift] or None
        self.s.store.record_apply(
            self.run, lp.lane, lp.commit, lp.fingerprint, result.value, error, self.started, self.timings, logs,
            cause=lp.cause.value, drift=drift,
        )  # fmt: skip

    def _result(
        self, result: Result, error: str | None = None, cause: Cause | None = None, logs: dict[str, str] | None = None
    ) -> LaneResult:
        action = self.lp.action
        return LaneResult(self.lp.lane, action, result, error, self.timings, logs or {}, cause or self.lp.cause)
