"""When the daemon looks again at lanes it could not act on, rather than at the next resync.

Each is one pending "look again" of `reconciler.daemon.conditions.Retries` (a newer one replaces it): lanes
blocked by another reconciler's lease or an unreachable host, specs in a backoff after a passing fault,
changes held by a change window. Read after every cycle and every operation's end.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import structlog

from reconciler.daemon.conditions import Retries
from reconciler.errors import HostUnreachableError
from reconciler.execute.cycle import window_clock
from reconciler.lane import LeasedBy
from reconciler.store.journal import Store
from reconciler.store.lanestate import lane_states

log = structlog.get_logger("lanes.daemon")


def retry_blocked(retries: Retries, store: Store, blocked: Mapping[str, str]) -> None:
    """Lanes blocked by a lease or an unreachable host are looked at again soon, not at the resync.

    One curve: a lease block's hold says when (`LeasedBy.at`, doubling from the blocking error's own
    `delay_s`); a lane whose host did not answer waits `HostUnreachableError.delay_s`.
    """
    if not blocked:
        retries.cancel("blocked-retry")
        return
    states = lane_states(store)
    now = time.time()
    due = []
    for lane in blocked:
        hold = states[lane].hold if lane in states else None
        at = hold.at if isinstance(hold, LeasedBy) else None
        due.append(at - now if at is not None else HostUnreachableError.delay_s)
    delay = max(0.5, min(due))
    log.info("cycle.blocked", lanes=sorted(blocked), retry_in_s=round(delay, 1))
    retries.later("blocked-retry", delay)


def retry_specs(retries: Retries, store: Store) -> None:
    """A spec that failed on a passing fault is tried again when its backoff ends, not at the next resync."""
    due = [at for _, at in store.retry_schedule().values()]
    if not due:
        retries.cancel("spec-retry")
        return
    delay = max(0.5, min(due) - time.time())
    log.info("cycle.spec_retry", retry_in_s=round(delay, 1))
    retries.later("spec-retry", delay)


def retry_windows(retries: Retries, store: Store) -> None:
    """A change held by a change window is looked at again when the window opens, not at the next resync."""
    due = [r.held_until for r in store.lanes() if r.held_until is not None]
    if not due:
        retries.cancel("window-retry")
        return
    delay = max(0.5, min(due) - window_clock())
    log.info("cycle.window_retry", retry_in_s=round(delay, 1))
    retries.later("window-retry", delay)
