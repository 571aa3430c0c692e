"""The one place a lane's health is written: `settle(store, lane, outcome, **fields)`.

Health follows `reconciler.plan.health.next_health` from the record's
current health and the typed outcome; callers say what happened, never which
health follows. The other fields (last error, fingerprints, the specs a
rollback restores) are facts the caller knows and are written beside it.
"""

from __future__ import annotations

import time
from typing import Any

from reconciler.errors import StepFailedError
from reconciler.plan.health import LaneHealth, Outcome, next_health, retry_delay
from reconciler.plan.steps import LanePlan
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
