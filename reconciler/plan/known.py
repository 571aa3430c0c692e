"""What the lanes' states (`reconciler.lane.LaneState`) tell the planner, read once per plan.

The planner takes one typed state per lane (`PlanOptions.lanes`); this module reads from them, in one place,
the few things a plan turns on: the spec condemned, the spec last seen ready, a backoff's end, a lane stopped
for a swap, a lane whose failure undid a swap, and the spec that serves while a failed one is held.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from reconciler.lane import FAILURE_HOLDS, LaneHealth, LaneState, SuspendedBy
from reconciler.plan.specjson import spec_from_json
from reconciler.plan.steps import Serving, WaitReady, fingerprint
from reconciler.plan.swaps import Stopped


@dataclass(frozen=True)
class Known:
    failed: Mapping[str, str]
    """lane -> fingerprint condemned: not retried until it changes or `lanes retry`."""
    ready: Mapping[str, str]
    """lane -> fingerprint last seen ready (its gate passed): in sync with it is a noop."""
    retry_at: Mapping[str, tuple[str, float]]
    """lane -> (fingerprint, epoch s): a spec that failed transiently is not tried before then."""
    stopped: Mapping[str, Stopped]
    """lane -> the commit it was stopped at and where its last healthy spec ran: a swap begun before a restart."""
    swapped: frozenset[str]
    """Lanes whose last failure undid a swap: only such a failed lane holds the lanes that gave it their hosts."""
    serving: Mapping[str, Serving]
    """lane -> the spec that last passed its gate and serves, for lanes whose desired spec is held after it
    failed: its drift is repaired meanwhile."""


def known(lanes: Mapping[str, LaneState], *, wait_backoff: bool = True, undoing: frozenset[str] = frozenset()) -> Known:
    """`wait_backoff`: False when a person asks for now (`lanes plan`/`apply`): a backoff paces the daemon's own
    retries only. `undoing`: the taking lanes of a swap undo still pending (a daemon killed while it ran)."""
    failed = {name: fp for name, s in lanes.items() if (fp := s.condemned) is not None}
    retry_at = {name: (b.fingerprint, b.at) for name, s in lanes.items() if (b := s.backoff) is not None}
    return Known(
        failed=failed,
        ready={name: s.serving for name, s in lanes.items() if s.serving},
        retry_at=retry_at if wait_backoff else {},
        stopped={name: stop for name, s in lanes.items() if (stop := _stopped(s)) is not None},
        swapped=frozenset({name for name, s in lanes.items() if s.swap_undone} | undoing),
        serving={name: serve for name, s in lanes.items() if (serve := _serving(s)) is not None},
    )


def _stopped(state: LaneState) -> Stopped | None:
    healthy = state.healthy
    if state.wanted.desired != "stopped" or state.health != LaneHealth.STOPPED or not state.applied:
        return None
    if healthy is None or not healthy.specs:
        return None
    ranks = [spec_from_json(dict(d)) for d in healthy.specs]
    hosts = tuple(dict.fromkeys(h for h, _ in ranks))
    env = tuple((h, spec.env_file) for h, spec in ranks if spec.env_file)
    return Stopped(state.applied, hosts, env)


def _serving(state: LaneState) -> Serving | None:
    """The last healthy spec, when it is what serves while the desired spec is held after it failed. A state whose
    serving fingerprint is not its healthy specs' own (a rollback that did not bring them back) has none."""
    hold = state.hold.under if isinstance(state.hold, SuspendedBy) else state.hold
    healthy = state.healthy
    if not isinstance(hold, FAILURE_HOLDS) or not state.serving or healthy is None or healthy.gate is None:
        return None
    specs = tuple(spec_from_json(dict(d)) for d in healthy.specs)
    if not specs or fingerprint(specs) != state.serving:
        return None
    gate = WaitReady(healthy.gate.host, healthy.gate.port, healthy.gate.served_model)
    return Serving(state.serving, specs, gate, healthy.commit)
