"""The one place a lane's health is written: `settle(store, lane, outcome, **fields)`.

Health follows `reconciler.plan.health.next_health` from the record's
current health and the typed outcome; callers say what happened, never which
health follows. The other fields (last error, fingerprints, the specs a
rollback restores) are facts the caller knows and are written beside it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from reconciler.errors import StepFailedError
from reconciler.execute.specjson import spec_from_json
from reconciler.plan.health import LaneHealth, Outcome, next_health, retry_delay
from reconciler.plan.planner import fingerprint
from reconciler.plan.steps import LanePlan, Serving, WaitReady
from reconciler.store.journal import LaneRecord, Store

CLEAR_RETRY: dict[str, Any] = {"retry_at": None, "retry_fingerprint": None, "transient_failures": 0}
"""Fields that end a backoff: the spec passed its gate, or it is condemned, or the lane stopped."""


def current_health(rec: LaneRecord | None) -> LaneHealth | None:
    if rec is None:
        return None
    try:
        return LaneHealth(rec.health)
    except ValueError:
        return None  # a journal written by a newer lanes: start from no knowledge rather than guess


_NOW = object()


def settle(store: Store, lane: str, outcome: Outcome, *, before: object = _NOW, **fields: Any) -> LaneHealth:
    """Write the lane's next health after `outcome`, with `fields`; returns the health written.

    `before` is the record the transition starts from: by default the lane's record now; a transaction
    that ends passes the record from before it began (its own "progressing" says nothing of what serves).
    """
    rec = store.lane(lane) if before is _NOW else before
    assert rec is None or isinstance(rec, LaneRecord)
    health = next_health(current_health(rec), outcome)
    fields.setdefault("held_until", None)  # a change is held only while the cycle that settles says so
    if outcome == Outcome.STARTED:
        fields.setdefault("swap_undone", None)  # tried again: the swap its last failure undid is behind it
    store.update_lane(lane, health=health.value, **fields)
    return health


def failure_fields(store: Store, lp: LanePlan, exc: StepFailedError, message: str) -> tuple[dict[str, Any], str]:
    """What a failed transaction leaves on the record: a condemned spec, or a retry after a backoff.

    A permanent failure condemns the spec (not tried until it changes or `lanes retry`). A transient one
    is tried again after a delay that doubles with each failure of the same spec in a row; past the
    flap limit it is condemned too, so a host that faults during every gate cannot redeploy a lane forever.
    """
    if not exc.transient or lp.fingerprint is None:
        return {"failed_fingerprint": lp.fingerprint, **CLEAR_RETRY}, message
    rec = store.lane(lp.lane)
    failures = (rec.transient_failures if rec and rec.retry_fingerprint == lp.fingerprint else 0) + 1
    delay = retry_delay(failures, exc.delay_s)
    if delay is None:
        note = f"{message} (a passing fault {failures} times in a row: held until the lane changes or `lanes retry`)"
        condemned: dict[str, Any] = {"failed_fingerprint": lp.fingerprint, "retry_at": None, "retry_fingerprint": None}
        return {**condemned, "transient_failures": failures}, note
    backoff: dict[str, Any] = {
        "retry_at": time.time() + delay,
        "retry_fingerprint": lp.fingerprint,
        "transient_failures": failures,
    }
    return backoff, f"{message} (a passing fault: tried again in {delay:.0f} s)"


def serving_specs(records: Iterable[LaneRecord]) -> dict[str, Serving]:
    """lane -> the spec that last passed its gate and serves, for lanes whose desired spec failed (condemned or
    in backoff): the planner repairs its drift while the failed spec is held. A record whose fingerprint is not
    its healthy specs' own (a rollback that did not bring them back) says nothing serves: no entry."""
    out: dict[str, Serving] = {}
    for rec in records:
        if not (rec.failed_fingerprint or rec.retry_fingerprint) or not rec.fingerprint or not rec.healthy_gate:
            continue
        specs = tuple(spec_from_json(d) for d in rec.healthy_specs)
        if not specs or fingerprint(specs) != rec.fingerprint:
            continue
        where = rec.healthy_gate
        gate = WaitReady(str(where["host"]), int(where["port"]), str(where["served_model"]))
        out[rec.name] = Serving(rec.fingerprint, specs, gate, rec.healthy_commit)
    return out


def settle_restored(store: Store, lp: LanePlan, timings: dict[str, float]) -> None:
    """The last healthy spec put back as it was (`Cause.RESTORED_DRIFT`) and seen ready again: degraded, as
    before its drift, with what drifted named; the failed spec's condemnation or backoff is left as it was."""
    drift = {"time": time.time(), "commit": lp.commit, "items": [d.to_json() for d in lp.drift]}
    settle(
        store, lp.lane, Outcome.HELD_SERVING,
        fingerprint=lp.fingerprint, last_error=lp.reason, timings=timings, drift=drift,
    )  # fmt: skip
