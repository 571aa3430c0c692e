"""The lane machine as a table: (state, event) -> (health, hold, phase, effects), for every pair below.

The table is written out, not computed, so a change to `transition` has to change a row here too, on purpose.
The states cover every health, every kind of hold and every phase of a transaction; the events cover every
event type and every observation; `test_the_table_covers_*` fails when a new one is added without its rows.

A cell reads `health hold phase effects`: `-` for none; a hold is `condemned:FP`, `backoff:FP@AT#N`,
`window@UNTIL`, `suspended:BY(UNDER)`, `leased:BY@AT#N`; effects are `restore`, `restore-nowait`, `stop-new` and
`say:KIND`. Every event happens at t=1000.
"""

from __future__ import annotations

import typing
from dataclasses import FrozenInstanceError, replace

import pytest

from reconciler.lane import (
    LANE_FILE,
    Announce,
    Backoff,
    Blocked,
    Condemned,
    Denied,
    Effect,
    Event,
    Gate,
    GatePassed,
    Hold,
    Internal,
    Interrupted,
    LaneHealth,
    LaneState,
    LeasedBy,
    Observed,
    Phase,
    PlanFailed,
    Preempted,
    Progressed,
    Restored,
    RestoreHealthy,
    Resumed,
    Retried,
    Seen,
    Serving,
    Started,
    StepFailed,
    StopNew,
    Stopped,
    Suspended,
    SuspendedBy,
    SwapUndone,
    Transaction,
    TxKind,
    Wanted,
    Window,
    events,
    next_wake,
    transition,
)
from reconciler.lane.machine import LEASE_JITTER, LEASE_RETRY_MAX_S
from reconciler.lane.state import LastError

pytestmark = pytest.mark.timeout(20)

OLD = Serving("old", ({"host": "spark-01", "name": "lanes-chat-0"},), Gate("spark-01", 8000, "chat"), "c0ffee")
NEW = Serving("new", ({"host": "spark-01", "name": "lanes-chat-0"},), Gate("spark-01", 8000, "chat"), "beef00")
SERVES = LaneState(health=LaneHealth.HEALTHY, serving="old", healthy=OLD, applied="c0ffee")


def _tx(kind: TxKind, phase: Phase, before: LaneHealth | None = LaneHealth.HEALTHY) -> Transaction:
    return Transaction(kind, "new", "beef00", phase, 900.0, 1500.0 if phase == Phase.GATING else None, before)


STATES: dict[str, LaneState] = {
    "new": LaneState(),
    "healthy": SERVES,
    "unseen": LaneState(health=LaneHealth.PROGRESSING, healthy=OLD),
    "preparing": LaneState(
        health=LaneHealth.PROGRESSING, serving="old", healthy=OLD, transaction=_tx(TxKind.DEPLOY, Phase.PREPARING)
    ),
    "stopping-first": LaneState(health=LaneHealth.PROGRESSING, transaction=_tx(TxKind.DEPLOY, Phase.STOPPING, None)),
    "starting": LaneState(health=LaneHealth.PROGRESSING, healthy=OLD, transaction=_tx(TxKind.DEPLOY, Phase.STARTING)),
    "gating": LaneState(health=LaneHealth.PROGRESSING, healthy=OLD, transaction=_tx(TxKind.DEPLOY, Phase.GATING)),
    "verifying": LaneState(health=LaneHealth.PROGRESSING, transaction=_tx(TxKind.VERIFY, Phase.GATING, None)),
    "draining": LaneState(
        health=LaneHealth.PROGRESSING, serving="old", healthy=OLD, transaction=_tx(TxKind.DEPLOY, Phase.DRAINING)
    ),
    "beside": LaneState(
        health=LaneHealth.PROGRESSING, serving="old", healthy=OLD, transaction=_tx(TxKind.DEPLOY, Phase.BESIDE)
    ),
    "watching": LaneState(
        health=LaneHealth.PROGRESSING, serving="old", healthy=OLD, transaction=_tx(TxKind.DEPLOY, Phase.WATCHING)
    ),
    "restoring": LaneState(
        health=LaneHealth.PROGRESSING, healthy=OLD, transaction=_tx(TxKind.RESTORE, Phase.RESTORING)
    ),
    "stopping-lane": LaneState(
        health=LaneHealth.PROGRESSING, serving="old", transaction=_tx(TxKind.STOP, Phase.STOPPING)
    ),
    "condemned": LaneState(health=LaneHealth.DEGRADED, serving="old", healthy=OLD, hold=Condemned("new")),
    "backoff": LaneState(health=LaneHealth.DEGRADED, serving="old", healthy=OLD, hold=Backoff("new", 1200.0, 1)),
    "backoff-last": LaneState(health=LaneHealth.DEGRADED, serving="old", healthy=OLD, hold=Backoff("new", 1200.0, 2)),
    "failed": LaneState(health=LaneHealth.FAILED, healthy=OLD, hold=Condemned("new")),
    "window": LaneState(health=LaneHealth.HEALTHY, serving="old", healthy=OLD, hold=Window(3600.0)),
    "lease-held": LaneState(health=LaneHealth.BLOCKED, hold=LeasedBy("lanes@other", 900.0, 1)),
    "suspended": LaneState(
        health=LaneHealth.DEGRADED, serving="old", healthy=OLD, hold=SuspendedBy("alice", "load test", Condemned("new"))
    ),
    "file-suspended": LaneState(health=LaneHealth.HEALTHY, serving="old", healthy=OLD, hold=SuspendedBy("lane file")),
    "denied": LaneState(health=LaneHealth.DENIED, serving="old", healthy=OLD),
    "stopped": LaneState(health=LaneHealth.STOPPED, healthy=OLD),
}

EVENTS: dict[str, Event] = {
    "observed-ready": Observed(seen=Seen.READY),
    "observed-not-answering": Observed(seen=Seen.NOT_ANSWERING),
    "observed-nothing-runs": Observed(seen=Seen.NOTHING_RUNS),
    "observed-unreachable": Observed(seen=Seen.UNREACHABLE),
    "started-new": Started(kind=TxKind.DEPLOY, fingerprint="new", commit="beef00"),
    "started-other": Started(kind=TxKind.DEPLOY, fingerprint="other", commit="d00d00"),
    "started-restore": Started(kind=TxKind.RESTORE, fingerprint="old", commit="beef00"),
    "progressed-gating": Progressed(phase=Phase.GATING, deadline=3400.0),
    "gate-passed-new": GatePassed(serving=NEW),
    "gate-passed-old": GatePassed(serving=OLD),
    "failed-untouched": StepFailed(touched=False, transient=False, why="pull refused"),
    "failed-touched": StepFailed(touched=True, transient=False, why="rank exited", engine="unrecognized arguments"),
    "failed-transient": StepFailed(touched=False, transient=True, delay_s=30.0, why="registry 503"),
    "restored": Restored(ok=True),
    "restore-failed": Restored(ok=False, why="old spec did not start"),
    "blocked-lease": Blocked(by="lanes@other", delay_s=2.0),
    "blocked-window": Blocked(by="change window", until=3600.0),
    "interrupted-touched": Interrupted(touched=True),
    "interrupted-untouched": Interrupted(touched=False),
    "preempted-touched": Preempted(touched=True),
    "preempted-untouched": Preempted(touched=False),
    "denied": Denied(why="memory budget"),
    "plan-failed": PlanFailed(why="model path missing"),
    "suspended-bob": Suspended(by="bob", why="maintenance"),
    "resumed": Resumed(),
    "retried": Retried(),
    "stopped": Stopped(),
    "swap-undone": SwapUndone(undone="swap rolled back: prod serves again"),
    "internal": Internal(why="a bug"),
}


def _hold(hold: Hold | None) -> str:
    match hold:
        case None:
            return "-"
        case Condemned():
            return f"condemned:{hold.fingerprint}#{hold.n}"
        case Backoff():
            return f"backoff:{hold.fingerprint}@{hold.at:.0f}#{hold.n}"
        case Window():
            return f"window@{hold.until:.0f}"
        case SuspendedBy():
            return f"suspended:{hold.by.replace(' ', '-')}({_hold(hold.under)})"
        case LeasedBy():
            return f"leased:{hold.by}" + (f"@{hold.at:.0f}#{hold.n}" if hold.at is not None else "")
    raise AssertionError(hold)


def _effect(effect: Effect) -> str:
    match effect:
        case RestoreHealthy():
            return "restore" if effect.wait else "restore-nowait"
        case StopNew():
            return "stop-new"
        case Announce():
            return f"say:{effect.kind.value}"
    raise AssertionError(effect)


def cell(state: LaneState, effects: tuple[Effect, ...]) -> str:
    health = state.health.value if state.health else "-"
    phase = state.transaction.phase.value if state.transaction else "-"
    said = ",".join(_effect(e) for e in effects) or "-"
    return f"{health} {_hold(state.hold)} {phase} {state.serving or '-'} {said}"


TABLE = """
new             observed-ready         | healthy - - - -
new             observed-not-answering | degraded - - - -
new             observed-nothing-runs  | stopped - - - -
new             observed-unreachable   | degraded - - - -
new             started-new            | progressing - preparing - -
new             started-other          | progressing - preparing - -
new             started-restore        | progressing - preparing - -
new             progressed-gating      | - - - - -
new             gate-passed-new        | healthy - - new say:rolled-out
new             gate-passed-old        | healthy - - old say:rolled-out
new             failed-untouched       | failed - - - say:dark
new             failed-touched         | progressing - restoring - stop-new
new             failed-transient       | failed - - - say:dark
new             restored               | degraded - - - say:rolled-back
new             restore-failed         | failed - - - say:dark
new             blocked-lease          | blocked leased:lanes@other@1002#1 - - -
new             blocked-window         | blocked window@3600 - - -
new             interrupted-touched    | progressing - - - -
new             interrupted-untouched  | blocked - - - -
new             preempted-touched      | progressing - - - stop-new
new             preempted-untouched    | blocked - - - -
new             denied                 | denied - - - -
new             plan-failed            | failed - - - -
new             suspended-bob          | blocked suspended:bob(-) - - -
new             resumed                | - - - - -
new             retried                | - - - - -
new             stopped                | stopped - - - -
new             swap-undone            | - - - - -
new             internal               | blocked - - - -
healthy         observed-ready         | healthy - - old -
healthy         observed-not-answering | degraded - - old -
healthy         observed-nothing-runs  | stopped - - - -
healthy         observed-unreachable   | degraded - - old -
healthy         started-new            | progressing - preparing old -
healthy         started-other          | progressing - preparing old -
healthy         started-restore        | progressing - preparing old -
healthy         progressed-gating      | healthy - - old -
healthy         gate-passed-new        | healthy - - new say:rolled-out
healthy         gate-passed-old        | healthy - - old say:rolled-out
healthy         failed-untouched       | degraded - - old say:kept
healthy         failed-touched         | progressing - restoring - restore
healthy         failed-transient       | degraded - - old say:kept
healthy         restored               | degraded - - old say:rolled-back
healthy         restore-failed         | failed - - - say:dark
healthy         blocked-lease          | healthy leased:lanes@other@1002#1 - old -
healthy         blocked-window         | healthy window@3600 - old -
healthy         interrupted-touched    | progressing - - - restore-nowait
healthy         interrupted-untouched  | healthy - - old -
healthy         preempted-touched      | progressing - - - stop-new
healthy         preempted-untouched    | healthy - - old -
healthy         denied                 | denied - - old -
healthy         plan-failed            | degraded - - old -
healthy         suspended-bob          | healthy suspended:bob(-) - old -
healthy         resumed                | healthy - - old -
healthy         retried                | healthy - - old -
healthy         stopped                | stopped - - - -
healthy         swap-undone            | healthy - - old -
healthy         internal               | healthy - - old -
unseen          observed-ready         | healthy - - - -
unseen          observed-not-answering | progressing - - - -
unseen          observed-nothing-runs  | stopped - - - -
unseen          observed-unreachable   | progressing - - - -
unseen          started-new            | progressing - preparing - -
unseen          started-other          | progressing - preparing - -
unseen          started-restore        | progressing - preparing - -
unseen          progressed-gating      | progressing - - - -
unseen          gate-passed-new        | healthy - - new say:rolled-out
unseen          gate-passed-old        | healthy - - old say:rolled-out
unseen          failed-untouched       | failed - - - say:dark
unseen          failed-touched         | progressing - restoring - restore
unseen          failed-transient       | failed - - - say:dark
unseen          restored               | degraded - - old say:rolled-back
unseen          restore-failed         | failed - - - say:dark
unseen          blocked-lease          | blocked leased:lanes@other@1002#1 - - -
unseen          blocked-window         | blocked window@3600 - - -
unseen          interrupted-touched    | progressing - - - restore-nowait
unseen          interrupted-untouched  | progressing - - - -
unseen          preempted-touched      | progressing - - - stop-new
unseen          preempted-untouched    | progressing - - - -
unseen          denied                 | denied - - - -
unseen          plan-failed            | failed - - - -
unseen          suspended-bob          | progressing suspended:bob(-) - - -
unseen          resumed                | progressing - - - -
unseen          retried                | progressing - - - -
unseen          stopped                | stopped - - - -
unseen          swap-undone            | progressing - - - -
unseen          internal               | progressing - - - -
preparing       observed-ready         | progressing - preparing old -
preparing       observed-not-answering | progressing - preparing old -
preparing       observed-nothing-runs  | progressing - preparing old -
preparing       observed-unreachable   | progressing - preparing old -
preparing       started-new            | progressing - preparing old -
preparing       started-other          | progressing - preparing old -
preparing       started-restore        | progressing - preparing old -
preparing       progressed-gating      | progressing - gating old -
preparing       gate-passed-new        | healthy - - new say:rolled-out
preparing       gate-passed-old        | healthy - - old say:rolled-out
preparing       failed-untouched       | degraded condemned:new#0 - old say:kept
preparing       failed-touched         | progressing condemned:new#0 restoring - restore
preparing       failed-transient       | degraded backoff:new@1030#1 - old say:kept
preparing       restored               | degraded - - old say:rolled-back
preparing       restore-failed         | failed - - - say:dark
preparing       blocked-lease          | healthy leased:lanes@other@1002#1 - old -
preparing       blocked-window         | healthy window@3600 - old -
preparing       interrupted-touched    | progressing - - - restore-nowait
preparing       interrupted-untouched  | healthy - - old -
preparing       preempted-touched      | progressing - - - stop-new
preparing       preempted-untouched    | healthy - - old -
preparing       denied                 | denied - - old -
preparing       plan-failed            | degraded - - old -
preparing       suspended-bob          | progressing suspended:bob(-) preparing old -
preparing       resumed                | progressing - preparing old -
preparing       retried                | progressing - preparing old -
preparing       stopped                | stopped - - - -
preparing       swap-undone            | progressing - preparing old -
preparing       internal               | healthy - - old -
stopping-first  observed-ready         | progressing - stopping - -
stopping-first  observed-not-answering | progressing - stopping - -
stopping-first  observed-nothing-runs  | progressing - stopping - -
stopping-first  observed-unreachable   | progressing - stopping - -
stopping-first  started-new            | progressing - preparing - -
stopping-first  started-other          | progressing - preparing - -
stopping-first  started-restore        | progressing - preparing - -
stopping-first  progressed-gating      | progressing - gating - -
stopping-first  gate-passed-new        | healthy - - new say:rolled-out
stopping-first  gate-passed-old        | healthy - - old say:rolled-out
stopping-first  failed-untouched       | progressing condemned:new#0 restoring - stop-new
stopping-first  failed-touched         | progressing condemned:new#0 restoring - stop-new
stopping-first  failed-transient       | progressing backoff:new@1030#1 restoring - stop-new
stopping-first  restored               | degraded - - - say:rolled-back
stopping-first  restore-failed         | failed - - - say:dark
stopping-first  blocked-lease          | blocked leased:lanes@other@1002#1 - - -
stopping-first  blocked-window         | blocked window@3600 - - -
stopping-first  interrupted-touched    | progressing - - - -
stopping-first  interrupted-untouched  | progressing - - - -
stopping-first  preempted-touched      | progressing - - - stop-new
stopping-first  preempted-untouched    | progressing - - - stop-new
stopping-first  denied                 | denied - - - -
stopping-first  plan-failed            | failed - - - -
stopping-first  suspended-bob          | progressing suspended:bob(-) stopping - -
stopping-first  resumed                | progressing - stopping - -
stopping-first  retried                | progressing - stopping - -
stopping-first  stopped                | stopped - - - -
stopping-first  swap-undone            | progressing - stopping - -
stopping-first  internal               | blocked - - - -
starting        observed-ready         | progressing - starting - -
starting        observed-not-answering | progressing - starting - -
starting        observed-nothing-runs  | progressing - starting - -
starting        observed-unreachable   | progressing - starting - -
starting        started-new            | progressing - preparing - -
starting        started-other          | progressing - preparing - -
starting        started-restore        | progressing - preparing - -
starting        progressed-gating      | progressing - gating - -
starting        gate-passed-new        | healthy - - new say:rolled-out
starting        gate-passed-old        | healthy - - old say:rolled-out
starting        failed-untouched       | progressing condemned:new#0 restoring - restore
starting        failed-touched         | progressing condemned:new#0 restoring - restore
starting        failed-transient       | progressing backoff:new@1030#1 restoring - restore
starting        restored               | degraded - - old say:rolled-back
starting        restore-failed         | failed - - - say:dark
starting        blocked-lease          | healthy leased:lanes@other@1002#1 - - -
starting        blocked-window         | healthy window@3600 - - -
starting        interrupted-touched    | progressing - - - restore-nowait
starting        interrupted-untouched  | progressing - - - restore-nowait
starting        preempted-touched      | progressing - - - stop-new
starting        preempted-untouched    | progressing - - - stop-new
starting        denied                 | denied - - - -
starting        plan-failed            | degraded - - - -
starting        suspended-bob          | progressing suspended:bob(-) starting - -
starting        resumed                | progressing - starting - -
starting        retried                | progressing - starting - -
starting        stopped                | stopped - - - -
starting        swap-undone            | progressing - starting - -
starting        internal               | healthy - - - -
gating          observed-ready         | progressing - gating - -
gating          observed-not-answering | progressing - gating - -
gating          observed-nothing-runs  | progressing - gating - -
gating          observed-unreachable   | progressing - gating - -
gating          started-new            | progressing - preparing - -
gating          started-other          | progressing - preparing - -
gating          started-restore        | progressing - preparing - -
gating          progressed-gating      | progressing - gating - -
gating          gate-passed-new        | healthy - - new say:rolled-out
gating          gate-passed-old        | healthy - - old say:rolled-out
gating          failed-untouched       | progressing condemned:new#0 restoring - restore
gating          failed-touched         | progressing condemned:new#0 restoring - restore
gating          failed-transient       | progressing backoff:new@1030#1 restoring - restore
gating          restored               | degraded - - old say:rolled-back
gating          restore-failed         | failed - - - say:dark
gating          blocked-lease          | healthy leased:lanes@other@1002#1 - - -
gating          blocked-window         | healthy window@3600 - - -
gating          interrupted-touched    | progressing - - - restore-nowait
gating          interrupted-untouched  | progressing - - - restore-nowait
gating          preempted-touched      | progressing - - - stop-new
gating          preempted-untouched    | progressing - - - stop-new
gating          denied                 | denied - - - -
gating          plan-failed            | degraded - - - -
gating          suspended-bob          | progressing suspended:bob(-) gating - -
gating          resumed                | progressing - gating - -
gating          retried                | progressing - gating - -
gating          stopped                | stopped - - - -
gating          swap-undone            | progressing - gating - -
gating          internal               | healthy - - - -
verifying       observed-ready         | progressing - gating - -
verifying       observed-not-answering | progressing - gating - -
verifying       observed-nothing-runs  | progressing - gating - -
verifying       observed-unreachable   | progressing - gating - -
verifying       started-new            | progressing - preparing - -
verifying       started-other          | progressing - preparing - -
verifying       started-restore        | progressing - preparing - -
verifying       progressed-gating      | progressing - gating - -
verifying       gate-passed-new        | healthy - - new say:rolled-out
verifying       gate-passed-old        | healthy - - old say:rolled-out
verifying       failed-untouched       | progressing condemned:new#0 restoring - stop-new
verifying       failed-touched         | progressing condemned:new#0 restoring - stop-new
verifying       failed-transient       | progressing backoff:new@1030#1 restoring - stop-new
verifying       restored               | degraded - - - say:rolled-back
verifying       restore-failed         | failed - - - say:dark
verifying       blocked-lease          | blocked leased:lanes@other@1002#1 - - -
verifying       blocked-window         | blocked window@3600 - - -
verifying       interrupted-touched    | progressing - - - -
verifying       interrupted-untouched  | progressing - - - -
verifying       preempted-touched      | progressing - - - stop-new
verifying       preempted-untouched    | progressing - - - stop-new
verifying       denied                 | denied - - - -
verifying       plan-failed            | failed - - - -
verifying       suspended-bob          | progressing suspended:bob(-) gating - -
verifying       resumed                | progressing - gating - -
verifying       retried                | progressing - gating - -
verifying       stopped                | stopped - - - -
verifying       swap-undone            | progressing - gating - -
verifying       internal               | blocked - - - -
draining        observed-ready         | progressing - draining old -
draining        observed-not-answering | progressing - draining old -
draining        observed-nothing-runs  | progressing - draining old -
draining        observed-unreachable   | progressing - draining old -
draining        started-new            | progressing - preparing old -
draining        started-other          | progressing - preparing old -
draining        started-restore        | progressing - preparing old -
draining        progressed-gating      | progressing - gating old -
draining        gate-passed-new        | healthy - - new say:rolled-out
draining        gate-passed-old        | healthy - - old say:rolled-out
draining        failed-untouched       | degraded condemned:new#0 - old say:kept
draining        failed-touched         | progressing condemned:new#0 restoring - restore
draining        failed-transient       | degraded backoff:new@1030#1 - old say:kept
draining        restored               | degraded - - old say:rolled-back
draining        restore-failed         | failed - - - say:dark
draining        blocked-lease          | healthy leased:lanes@other@1002#1 - old -
draining        blocked-window         | healthy window@3600 - old -
draining        interrupted-touched    | progressing - - - restore-nowait
draining        interrupted-untouched  | healthy - - old -
draining        preempted-touched      | progressing - - - stop-new
draining        preempted-untouched    | healthy - - old -
draining        denied                 | denied - - old -
draining        plan-failed            | degraded - - old -
draining        suspended-bob          | progressing suspended:bob(-) draining old -
draining        resumed                | progressing - draining old -
draining        retried                | progressing - draining old -
draining        stopped                | stopped - - - -
draining        swap-undone            | progressing - draining old -
draining        internal               | healthy - - old -
beside          observed-ready         | progressing - beside old -
beside          observed-not-answering | progressing - beside old -
beside          observed-nothing-runs  | progressing - beside old -
beside          observed-unreachable   | progressing - beside old -
beside          started-new            | progressing - preparing old -
beside          started-other          | progressing - preparing old -
beside          started-restore        | progressing - preparing old -
beside          progressed-gating      | progressing - gating old -
beside          gate-passed-new        | healthy - - new say:rolled-out
beside          gate-passed-old        | healthy - - old say:rolled-out
beside          failed-untouched       | degraded condemned:new#0 - old say:kept
beside          failed-touched         | progressing condemned:new#0 restoring - restore
beside          failed-transient       | degraded backoff:new@1030#1 - old say:kept
beside          restored               | degraded - - old say:rolled-back
beside          restore-failed         | failed - - - say:dark
beside          blocked-lease          | healthy leased:lanes@other@1002#1 - old -
beside          blocked-window         | healthy window@3600 - old -
beside          interrupted-touched    | progressing - - - restore-nowait
beside          interrupted-untouched  | healthy - - old -
beside          preempted-touched      | progressing - - - stop-new
beside          preempted-untouched    | healthy - - old -
beside          denied                 | denied - - old -
beside          plan-failed            | degraded - - old -
beside          suspended-bob          | progressing suspended:bob(-) beside old -
beside          resumed                | progressing - beside old -
beside          retried                | progressing - beside old -
beside          stopped                | stopped - - - -
beside          swap-undone            | progressing - beside old -
beside          internal               | healthy - - old -
watching        observed-ready         | progressing - watching old -
watching        observed-not-answering | progressing - watching old -
watching        observed-nothing-runs  | progressing - watching old -
watching        observed-unreachable   | progressing - watching old -
watching        started-new            | progressing - preparing old -
watching        started-other          | progressing - preparing old -
watching        started-restore        | progressing - preparing old -
watching        progressed-gating      | progressing - gating old -
watching        gate-passed-new        | healthy - - new say:rolled-out
watching        gate-passed-old        | healthy - - old say:rolled-out
watching        failed-untouched       | degraded condemned:new#0 - old say:kept
watching        failed-touched         | progressing condemned:new#0 restoring - restore
watching        failed-transient       | degraded backoff:new@1030#1 - old say:kept
watching        restored               | degraded - - old say:rolled-back
watching        restore-failed         | failed - - - say:dark
watching        blocked-lease          | healthy leased:lanes@other@1002#1 - old -
watching        blocked-window         | healthy window@3600 - old -
watching        interrupted-touched    | progressing - - - restore-nowait
watching        interrupted-untouched  | healthy - - old -
watching        preempted-touched      | progressing - - - stop-new
watching        preempted-untouched    | healthy - - old -
watching        denied                 | denied - - old -
watching        plan-failed            | degraded - - old -
watching        suspended-bob          | progressing suspended:bob(-) watching old -
watching        resumed                | progressing - watching old -
watching        retried                | progressing - watching old -
watching        stopped                | stopped - - - -
watching        swap-undone            | progressing - watching old -
watching        internal               | healthy - - old -
restoring       observed-ready         | progressing - restoring - -
restoring       observed-not-answering | progressing - restoring - -
restoring       observed-nothing-runs  | progressing - restoring - -
restoring       observed-unreachable   | progressing - restoring - -
restoring       started-new            | progressing - preparing - -
restoring       started-other          | progressing - preparing - -
restoring       started-restore        | progressing - preparing - -
restoring       progressed-gating      | progressing - gating - -
restoring       gate-passed-new        | healthy - - new say:rolled-out
restoring       gate-passed-old        | healthy - - old say:rolled-out
restoring       failed-untouched       | failed - - - say:dark
restoring       failed-touched         | failed - - - say:dark
restoring       failed-transient       | failed - - - say:dark
restoring       restored               | degraded - - old say:rolled-back
restoring       restore-failed         | failed - - - say:dark
restoring       blocked-lease          | healthy leased:lanes@other@1002#1 - - -
restoring       blocked-window         | healthy window@3600 - - -
restoring       interrupted-touched    | progressing - - - restore-nowait
restoring       interrupted-untouched  | progressing - - - restore-nowait
restoring       preempted-touched      | progressing - - - stop-new
restoring       preempted-untouched    | progressing - - - stop-new
restoring       denied                 | denied - - - -
restoring       plan-failed            | degraded - - - -
restoring       suspended-bob          | progressing suspended:bob(-) restoring - -
restoring       resumed                | progressing - restoring - -
restoring       retried                | progressing - restoring - -
restoring       stopped                | stopped - - - -
restoring       swap-undone            | progressing - restoring - -
restoring       internal               | healthy - - - -
stopping-lane   observed-ready         | progressing - stopping old -
stopping-lane   observed-not-answering | progressing - stopping old -
stopping-lane   observed-nothing-runs  | progressing - stopping old -
stopping-lane   observed-unreachable   | progressing - stopping old -
stopping-lane   started-new            | progressing - preparing old -
stopping-lane   started-other          | progressing - preparing old -
stopping-lane   started-restore        | progressing - preparing old -
stopping-lane   progressed-gating      | progressing - gating old -
stopping-lane   gate-passed-new        | healthy - - new say:rolled-out
stopping-lane   gate-passed-old        | healthy - - old say:rolled-out
stopping-lane   failed-untouched       | healthy - - old -
stopping-lane   failed-touched         | healthy - - old -
stopping-lane   failed-transient       | healthy - - old -
stopping-lane   restored               | degraded - - - say:rolled-back
stopping-lane   restore-failed         | failed - - - say:dark
stopping-lane   blocked-lease          | healthy leased:lanes@other@1002#1 - old -
stopping-lane   blocked-window         | healthy window@3600 - old -
stopping-lane   interrupted-touched    | progressing - - - -
stopping-lane   interrupted-untouched  | progressing - - - -
stopping-lane   preempted-touched      | progressing - - - stop-new
stopping-lane   preempted-untouched    | progressing - - - stop-new
stopping-lane   denied                 | denied - - old -
stopping-lane   plan-failed            | degraded - - old -
stopping-lane   suspended-bob          | progressing suspended:bob(-) stopping old -
stopping-lane   resumed                | progressing - stopping old -
stopping-lane   retried                | progressing - stopping old -
stopping-lane   stopped                | stopped - - - -
stopping-lane   swap-undone            | progressing - stopping old -
stopping-lane   internal               | healthy - - old -
condemned       observed-ready         | degraded condemned:new#0 - old -
condemned       observed-not-answering | degraded condemned:new#0 - old -
condemned       observed-nothing-runs  | stopped condemned:new#0 - - -
condemned       observed-unreachable   | degraded condemned:new#0 - old -
condemned       started-new            | progressing condemned:new#0 preparing old -
condemned       started-other          | progressing - preparing old -
condemned       started-restore        | progressing condemned:new#0 preparing old -
condemned       progressed-gating      | degraded condemned:new#0 - old -
condemned       gate-passed-new        | healthy - - new say:rolled-out
condemned       gate-passed-old        | degraded condemned:new#0 - old -
condemned       failed-untouched       | degraded condemned:new#0 - old say:kept
condemned       failed-touched         | progressing condemned:new#0 restoring - restore
condemned       failed-transient       | degraded condemned:new#0 - old say:kept
condemned       restored               | degraded condemned:new#0 - old say:rolled-back
condemned       restore-failed         | failed condemned:new#0 - - say:dark
condemned       blocked-lease          | degraded condemned:new#0 - old -
condemned       blocked-window         | degraded condemned:new#0 - old -
condemned       interrupted-touched    | progressing condemned:new#0 - - restore-nowait
condemned       interrupted-untouched  | degraded condemned:new#0 - old -
condemned       preempted-touched      | progressing condemned:new#0 - - stop-new
condemned       preempted-untouched    | degraded condemned:new#0 - old -
condemned       denied                 | denied condemned:new#0 - old -
condemned       plan-failed            | degraded condemned:new#0 - old -
condemned       suspended-bob          | degraded suspended:bob(condemned:new#0) - old -
condemned       resumed                | degraded condemned:new#0 - old -
condemned       retried                | degraded - - old -
condemned       stopped                | stopped - - - -
condemned       swap-undone            | degraded condemned:new#0 - old -
condemned       internal               | degraded condemned:new#0 - old -
backoff         observed-ready         | degraded backoff:new@1200#1 - old -
backoff         observed-not-answering | degraded backoff:new@1200#1 - old -
backoff         observed-nothing-runs  | stopped backoff:new@1200#1 - - -
backoff         observed-unreachable   | degraded backoff:new@1200#1 - old -
backoff         started-new            | progressing backoff:new@1200#1 preparing old -
backoff         started-other          | progressing - preparing old -
backoff         started-restore        | progressing backoff:new@1200#1 preparing old -
backoff         progressed-gating      | degraded backoff:new@1200#1 - old -
backoff         gate-passed-new        | healthy - - new say:rolled-out
backoff         gate-passed-old        | degraded backoff:new@1200#1 - old -
backoff         failed-untouched       | degraded backoff:new@1200#1 - old say:kept
backoff         failed-touched         | progressing backoff:new@1200#1 restoring - restore
backoff         failed-transient       | degraded backoff:new@1200#1 - old say:kept
backoff         restored               | degraded backoff:new@1200#1 - old say:rolled-back
backoff         restore-failed         | failed backoff:new@1200#1 - - say:dark
backoff         blocked-lease          | degraded backoff:new@1200#1 - old -
backoff         blocked-window         | degraded backoff:new@1200#1 - old -
backoff         interrupted-touched    | progressing backoff:new@1200#1 - - restore-nowait
backoff         interrupted-untouched  | degraded backoff:new@1200#1 - old -
backoff         preempted-touched      | progressing backoff:new@1200#1 - - stop-new
backoff         preempted-untouched    | degraded backoff:new@1200#1 - old -
backoff         denied                 | denied backoff:new@1200#1 - old -
backoff         plan-failed            | degraded backoff:new@1200#1 - old -
backoff         suspended-bob          | degraded suspended:bob(backoff:new@1200#1) - old -
backoff         resumed                | degraded backoff:new@1200#1 - old -
backoff         retried                | degraded - - old -
backoff         stopped                | stopped - - - -
backoff         swap-undone            | degraded backoff:new@1200#1 - old -
backoff         internal               | degraded backoff:new@1200#1 - old -
backoff-last    observed-ready         | degraded backoff:new@1200#2 - old -
backoff-last    observed-not-answering | degraded backoff:new@1200#2 - old -
backoff-last    observed-nothing-runs  | stopped backoff:new@1200#2 - - -
backoff-last    observed-unreachable   | degraded backoff:new@1200#2 - old -
backoff-last    started-new            | progressing backoff:new@1200#2 preparing old -
backoff-last    started-other          | progressing - preparing old -
backoff-last    started-restore        | progressing backoff:new@1200#2 preparing old -
backoff-last    progressed-gating      | degraded backoff:new@1200#2 - old -
backoff-last    gate-passed-new        | healthy - - new say:rolled-out
backoff-last    gate-passed-old        | degraded backoff:new@1200#2 - old -
backoff-last    failed-untouched       | degraded backoff:new@1200#2 - old say:kept
backoff-last    failed-touched         | progressing backoff:new@1200#2 restoring - restore
backoff-last    failed-transient       | degraded backoff:new@1200#2 - old say:kept
backoff-last    restored               | degraded backoff:new@1200#2 - old say:rolled-back
backoff-last    restore-failed         | failed backoff:new@1200#2 - - say:dark
backoff-last    blocked-lease          | degraded backoff:new@1200#2 - old -
backoff-last    blocked-window         | degraded backoff:new@1200#2 - old -
backoff-last    interrupted-touched    | progressing backoff:new@1200#2 - - restore-nowait
backoff-last    interrupted-untouched  | degraded backoff:new@1200#2 - old -
backoff-last    preempted-touched      | progressing backoff:new@1200#2 - - stop-new
backoff-last    preempted-untouched    | degraded backoff:new@1200#2 - old -
backoff-last    denied                 | denied backoff:new@1200#2 - old -
backoff-last    plan-failed            | degraded backoff:new@1200#2 - old -
backoff-last    suspended-bob          | degraded suspended:bob(backoff:new@1200#2) - old -
backoff-last    resumed                | degraded backoff:new@1200#2 - old -
backoff-last    retried                | degraded - - old -
backoff-last    stopped                | stopped - - - -
backoff-last    swap-undone            | degraded backoff:new@1200#2 - old -
backoff-last    internal               | degraded backoff:new@1200#2 - old -
failed          observed-ready         | degraded condemned:new#0 - - -
failed          observed-not-answering | degraded condemned:new#0 - - -
failed          observed-nothing-runs  | stopped condemned:new#0 - - -
failed          observed-unreachable   | failed condemned:new#0 - - -
failed          started-new            | progressing condemned:new#0 preparing - -
failed          started-other          | progressing - preparing - -
failed          started-restore        | progressing condemned:new#0 preparing - -
failed          progressed-gating      | failed condemned:new#0 - - -
failed          gate-passed-new        | healthy - - new say:rolled-out
failed          gate-passed-old        | degraded condemned:new#0 - old -
failed          failed-untouched       | failed condemned:new#0 - - say:dark
failed          failed-touched         | progressing condemned:new#0 restoring - restore
failed          failed-transient       | failed condemned:new#0 - - say:dark
failed          restored               | degraded condemned:new#0 - old say:rolled-back
failed          restore-failed         | failed condemned:new#0 - - say:dark
failed          blocked-lease          | failed condemned:new#0 - - -
failed          blocked-window         | failed condemned:new#0 - - -
failed          interrupted-touched    | progressing condemned:new#0 - - restore-nowait
failed          interrupted-untouched  | failed condemned:new#0 - - -
failed          preempted-touched      | progressing condemned:new#0 - - stop-new
failed          preempted-untouched    | failed condemned:new#0 - - -
failed          denied                 | denied condemned:new#0 - - -
failed          plan-failed            | failed condemned:new#0 - - -
failed          suspended-bob          | failed suspended:bob(condemned:new#0) - - -
failed          resumed                | failed condemned:new#0 - - -
failed          retried                | failed - - - -
failed          stopped                | stopped - - - -
failed          swap-undone            | failed condemned:new#0 - - -
failed          internal               | failed condemned:new#0 - - -
window          observed-ready         | healthy - - old -
window          observed-not-answering | degraded - - old -
window          observed-nothing-runs  | stopped - - - -
window          observed-unreachable   | degraded - - old -
window          started-new            | progressing - preparing old -
window          started-other          | progressing - preparing old -
window          started-restore        | progressing - preparing old -
window          progressed-gating      | healthy - - old -
window          gate-passed-new        | healthy - - new say:rolled-out
window          gate-passed-old        | healthy - - old say:rolled-out
window          failed-untouched       | degraded - - old say:kept
window          failed-touched         | progressing - restoring - restore
window          failed-transient       | degraded - - old say:kept
window          restored               | degraded - - old say:rolled-back
window          restore-failed         | failed - - - say:dark
window          blocked-lease          | healthy leased:lanes@other@1002#1 - old -
window          blocked-window         | healthy window@3600 - old -
window          interrupted-touched    | progressing - - - restore-nowait
window          interrupted-untouched  | healthy - - old -
window          preempted-touched      | progressing - - - stop-new
window          preempted-untouched    | healthy - - old -
window          denied                 | denied - - old -
window          plan-failed            | degraded - - old -
window          suspended-bob          | healthy suspended:bob(-) - old -
window          resumed                | healthy - - old -
window          retried                | healthy - - old -
window          stopped                | stopped - - - -
window          swap-undone            | healthy - - old -
window          internal               | healthy - - old -
lease-held      observed-ready         | healthy - - - -
lease-held      observed-not-answering | degraded - - - -
lease-held      observed-nothing-runs  | stopped - - - -
lease-held      observed-unreachable   | blocked - - - -
lease-held      started-new            | progressing - preparing - -
lease-held      started-other          | progressing - preparing - -
lease-held      started-restore        | progressing - preparing - -
lease-held      progressed-gating      | blocked - - - -
lease-held      gate-passed-new        | healthy - - new say:rolled-out
lease-held      gate-passed-old        | healthy - - old say:rolled-out
lease-held      failed-untouched       | failed - - - say:dark
lease-held      failed-touched         | progressing - restoring - stop-new
lease-held      failed-transient       | failed - - - say:dark
lease-held      restored               | degraded - - - say:rolled-back
lease-held      restore-failed         | failed - - - say:dark
lease-held      blocked-lease          | blocked leased:lanes@other@1004#2 - - -
lease-held      blocked-window         | blocked window@3600 - - -
lease-held      interrupted-touched    | progressing - - - -
lease-held      interrupted-untouched  | blocked - - - -
lease-held      preempted-touched      | progressing - - - stop-new
lease-held      preempted-untouched    | blocked - - - -
lease-held      denied                 | denied - - - -
lease-held      plan-failed            | failed - - - -
lease-held      suspended-bob          | blocked suspended:bob(-) - - -
lease-held      resumed                | blocked - - - -
lease-held      retried                | blocked - - - -
lease-held      stopped                | stopped - - - -
lease-held      swap-undone            | blocked - - - -
lease-held      internal               | blocked - - - -
suspended       observed-ready         | degraded suspended:alice(condemned:new#0) - old -
suspended       observed-not-answering | degraded suspended:alice(condemned:new#0) - old -
suspended       observed-nothing-runs  | stopped suspended:alice(condemned:new#0) - - -
suspended       observed-unreachable   | degraded suspended:alice(condemned:new#0) - old -
suspended       started-new            | progressing suspended:alice(condemned:new#0) preparing old -
suspended       started-other          | progressing suspended:alice(-) preparing old -
suspended       started-restore        | progressing suspended:alice(condemned:new#0) preparing old -
suspended       progressed-gating      | degraded suspended:alice(condemned:new#0) - old -
suspended       gate-passed-new        | healthy suspended:alice(-) - new say:rolled-out
suspended       gate-passed-old        | degraded suspended:alice(condemned:new#0) - old -
suspended       failed-untouched       | degraded suspended:alice(condemned:new#0) - old say:kept
suspended       failed-touched         | progressing suspended:alice(condemned:new#0) restoring - restore
suspended       failed-transient       | degraded suspended:alice(condemned:new#0) - old say:kept
suspended       restored               | degraded suspended:alice(condemned:new#0) - old say:rolled-back
suspended       restore-failed         | failed suspended:alice(condemned:new#0) - - say:dark
suspended       blocked-lease          | degraded suspended:alice(condemned:new#0) - old -
suspended       blocked-window         | degraded suspended:alice(condemned:new#0) - old -
suspended       interrupted-touched    | progressing suspended:alice(condemned:new#0) - - restore-nowait
suspended       interrupted-untouched  | degraded suspended:alice(condemned:new#0) - old -
suspended       preempted-touched      | progressing suspended:alice(condemned:new#0) - - stop-new
suspended       preempted-untouched    | degraded suspended:alice(condemned:new#0) - old -
suspended       denied                 | denied suspended:alice(condemned:new#0) - old -
suspended       plan-failed            | degraded suspended:alice(condemned:new#0) - old -
suspended       suspended-bob          | degraded suspended:bob(condemned:new#0) - old -
suspended       resumed                | degraded condemned:new#0 - old -
suspended       retried                | degraded suspended:alice(-) - old -
suspended       stopped                | stopped suspended:alice(-) - - -
suspended       swap-undone            | degraded suspended:alice(condemned:new#0) - old -
suspended       internal               | degraded suspended:alice(condemned:new#0) - old -
file-suspended  observed-ready         | healthy - - old -
file-suspended  observed-not-answering | degraded - - old -
file-suspended  observed-nothing-runs  | stopped - - - -
file-suspended  observed-unreachable   | degraded - - old -
file-suspended  started-new            | progressing - preparing old -
file-suspended  started-other          | progressing - preparing old -
file-suspended  started-restore        | progressing - preparing old -
file-suspended  progressed-gating      | healthy - - old -
file-suspended  gate-passed-new        | healthy - - new say:rolled-out
file-suspended  gate-passed-old        | healthy - - old say:rolled-out
file-suspended  failed-untouched       | degraded - - old say:kept
file-suspended  failed-touched         | progressing - restoring - restore
file-suspended  failed-transient       | degraded - - old say:kept
file-suspended  restored               | degraded - - old say:rolled-back
file-suspended  restore-failed         | failed - - - say:dark
file-suspended  blocked-lease          | healthy leased:lanes@other@1002#1 - old -
file-suspended  blocked-window         | healthy window@3600 - old -
file-suspended  interrupted-touched    | progressing - - - restore-nowait
file-suspended  interrupted-untouched  | healthy - - old -
file-suspended  preempted-touched      | progressing - - - stop-new
file-suspended  preempted-untouched    | healthy - - old -
file-suspended  denied                 | denied - - old -
file-suspended  plan-failed            | degraded - - old -
file-suspended  suspended-bob          | healthy suspended:bob(-) - old -
file-suspended  resumed                | healthy - - old -
file-suspended  retried                | healthy - - old -
file-suspended  stopped                | stopped - - - -
file-suspended  swap-undone            | healthy - - old -
file-suspended  internal               | healthy - - old -
denied          observed-ready         | healthy - - old -
denied          observed-not-answering | degraded - - old -
denied          observed-nothing-runs  | stopped - - - -
denied          observed-unreachable   | denied - - old -
denied          started-new            | progressing - preparing old -
denied          started-other          | progressing - preparing old -
denied          started-restore        | progressing - preparing old -
denied          progressed-gating      | denied - - old -
denied          gate-passed-new        | healthy - - new say:rolled-out
denied          gate-passed-old        | healthy - - old say:rolled-out
denied          failed-untouched       | failed - - old say:dark
denied          failed-touched         | progressing - restoring - restore
denied          failed-transient       | failed - - old say:dark
denied          restored               | degraded - - old say:rolled-back
denied          restore-failed         | failed - - - say:dark
denied          blocked-lease          | denied leased:lanes@other@1002#1 - old -
denied          blocked-window         | denied window@3600 - old -
denied          interrupted-touched    | progressing - - - restore-nowait
denied          interrupted-untouched  | denied - - old -
denied          preempted-touched      | progressing - - - stop-new
denied          preempted-untouched    | denied - - old -
denied          denied                 | denied - - old -
denied          plan-failed            | failed - - old -
denied          suspended-bob          | denied suspended:bob(-) - old -
denied          resumed                | denied - - old -
denied          retried                | denied - - old -
denied          stopped                | stopped - - - -
denied          swap-undone            | denied - - old -
denied          internal               | denied - - old -
stopped         observed-ready         | healthy - - - -
stopped         observed-not-answering | degraded - - - -
stopped         observed-nothing-runs  | stopped - - - -
stopped         observed-unreachable   | stopped - - - -
stopped         started-new            | progressing - preparing - -
stopped         started-other          | progressing - preparing - -
stopped         started-restore        | progressing - preparing - -
stopped         progressed-gating      | stopped - - - -
stopped         gate-passed-new        | healthy - - new say:rolled-out
stopped         gate-passed-old        | healthy - - old say:rolled-out
stopped         failed-untouched       | failed - - - say:dark
stopped         failed-touched         | progressing - restoring - restore
stopped         failed-transient       | failed - - - say:dark
stopped         restored               | degraded - - old say:rolled-back
stopped         restore-failed         | failed - - - say:dark
stopped         blocked-lease          | stopped leased:lanes@other@1002#1 - - -
stopped         blocked-window         | stopped window@3600 - - -
stopped         interrupted-touched    | progressing - - - restore-nowait
stopped         interrupted-untouched  | stopped - - - -
stopped         preempted-touched      | progressing - - - stop-new
stopped         preempted-untouched    | stopped - - - -
stopped         denied                 | denied - - - -
stopped         plan-failed            | failed - - - -
stopped         suspended-bob          | stopped suspended:bob(-) - - -
stopped         resumed                | stopped - - - -
stopped         retried                | stopped - - - -
stopped         stopped                | stopped - - - -
stopped         swap-undone            | stopped - - - -
stopped         internal               | stopped - - - -
"""


def _rows() -> list[tuple[str, str, str]]:
    out = []
    for line in TABLE.strip().splitlines():
        left, right = line.split("|")
        state, event = left.split()
        out.append((state, event, " ".join(right.split())))
    return out


ROWS = _rows()


def test_the_table_covers_every_state_and_event() -> None:
    assert {(s, e) for s, e, _ in ROWS} == {(s, e) for s in STATES for e in EVENTS}
    assert len(ROWS) == len(STATES) * len(EVENTS)


def test_the_cases_cover_every_enum_and_event_type() -> None:
    event_types = {t for t in vars(events).values() if isinstance(t, type) and issubclass(t, Event) and t is not Event}
    assert {type(e) for e in EVENTS.values()} == event_types
    assert {e.seen for e in EVENTS.values() if isinstance(e, Observed)} == set(Seen)
    assert {s.health for s in STATES.values()} == {None, *LaneHealth}
    hold_types = set(typing.get_args(Hold))
    assert {type(s.hold) for s in STATES.values() if s.hold is not None} == hold_types
    assert {s.transaction.phase for s in STATES.values() if s.transaction} == set(Phase)
    assert {s.transaction.kind for s in STATES.values() if s.transaction} == set(TxKind)


@pytest.mark.parametrize(("state", "event", "after"), ROWS, ids=lambda v: str(v).replace(" ", "_"))
def test_transition(state: str, event: str, after: str) -> None:
    got, effects = transition(STATES[state], EVENTS[event], 1000.0)
    assert cell(got, effects) == after


def test_a_state_cannot_be_changed_in_place() -> None:
    with pytest.raises(FrozenInstanceError):
        SERVES.health = LaneHealth.FAILED  # type: ignore[misc]


def test_backoff_doubles_then_condemns_at_the_flap_limit() -> None:
    """Transient failures of one spec: tried again after 30 s, then 60 s, then condemned (FLAP_LIMIT = 3)."""
    state, holds = SERVES, []
    for t in (1000.0, 2000.0, 3000.0):
        state, _ = transition(state, Started(kind=TxKind.DEPLOY, fingerprint="new", commit="beef00"), t)
        state, _ = transition(state, StepFailed(touched=False, transient=True, delay_s=30.0, why="503"), t)
        holds.append(state.hold)
    assert holds == [Backoff("new", 1030.0, 1), Backoff("new", 2060.0, 2), Condemned("new", 3)]
    assert next_wake(state) is None  # condemned: only a new commit or `lanes retry` moves it


def test_a_new_spec_owes_nothing_to_the_last_ones_backoff() -> None:
    state, _ = transition(STATES["backoff-last"], Started(kind=TxKind.DEPLOY, fingerprint="other", commit="d0"), 1.0)
    state, _ = transition(state, StepFailed(touched=False, transient=True, delay_s=30.0, why="503"), 1.0)
    assert state.hold == Backoff("other", 31.0, 1)


def test_next_wake_is_the_earliest_of_backoff_window_and_deadline() -> None:
    assert next_wake(STATES["backoff"]) == 1200.0
    assert next_wake(STATES["window"]) == 3600.0
    assert next_wake(STATES["gating"]) == 1500.0
    assert next_wake(STATES["lease-held"]) == 900.0
    assert next_wake(STATES["healthy"]) is None
    assert next_wake(STATES["suspended"]) is None
    under_backoff = LaneState(hold=SuspendedBy("alice", under=Backoff("new", 5.0, 1)))
    assert next_wake(under_backoff) is None  # the backoff waits for the suspension to end
    assert next_wake(transition(under_backoff, Resumed(), 10.0)[0]) == 5.0


def test_the_last_error_keeps_the_engines_own_words() -> None:
    state, _ = transition(STATES["gating"], EVENTS["failed-touched"], 1000.0)
    assert state.error == LastError("rank exited", "unrecognized arguments", 1000.0)
    restored, _ = transition(state, Restored(ok=True, why="rolled back to c0ffee"), 1001.0)
    assert restored.error == LastError("rank exited; rolled back to c0ffee", "unrecognized arguments", 1001.0)


def test_a_look_that_says_the_same_again_keeps_when_it_was_first_said() -> None:
    held = Observed(seen=Seen.NOT_ANSWERING, why="the engine does not answer")
    first, _ = transition(STATES["healthy"], held, 1000.0)
    again, _ = transition(first, held, 1300.0)
    assert again == first and again.error == LastError("the engine does not answer", None, 1000.0)
    other, _ = transition(again, Observed(seen=Seen.NOT_ANSWERING, why="it answered 503"), 1600.0)
    assert other.error == LastError("it answered 503", None, 1600.0)
    # A failure is news however it is worded: its time is its own.
    failed, _ = transition(STATES["gating"], EVENTS["failed-touched"], 1000.0)
    failed, _ = transition(replace(failed, transaction=STATES["gating"].transaction), EVENTS["failed-touched"], 2000.0)
    assert failed.error is not None and failed.error.at == 2000.0


def test_a_passing_fault_says_when_it_is_tried_again() -> None:
    state, _ = transition(STATES["preparing"], EVENTS["failed-transient"], 1000.0)
    assert state.error is not None and state.error.message == "registry 503 (a passing fault: tried again in 30 s)"
    state, _ = transition(STATES["backoff-last"], Started(kind=TxKind.DEPLOY, fingerprint="new", commit="b"), 1.0)
    state, _ = transition(state, EVENTS["failed-transient"], 1.0)
    assert state.error is not None and "3 times in a row: held until the lane changes" in state.error.message


def test_an_observation_keeps_what_the_commit_wants() -> None:
    wanted = Wanted("running", "beef00", ("spark-01",))
    state, _ = transition(STATES["gating"], Observed(seen=Seen.READY, wanted=wanted), 1000.0)
    assert state.wanted == wanted
    assert state.transaction == STATES["gating"].transaction  # the gate, not the resync, decides the lane


def test_a_blocked_lane_follows_one_curve_from_the_errors_own_delay() -> None:
    """Blocked by a lease again and again: looked at after the error's delay_s, doubling, at most a minute
    apart (LEASE_RETRY_MAX_S); the daemon's wake is that time; any other news starts the curve over."""
    state, ats = SERVES, []
    for t in (1000.0, 1100.0, 1200.0, 1300.0, 1400.0, 1500.0, 1600.0, 1700.0):
        state, _ = transition(state, Blocked(by="lanes@other", delay_s=2.0, why="leased"), t)
        assert isinstance(state.hold, LeasedBy)
        assert next_wake(state) == state.hold.at
        ats.append((state.hold.at or 0.0) - t)
    assert ats == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    state, _ = transition(state, Observed(seen=Seen.READY), 1800.0)
    state, _ = transition(state, Blocked(by="lanes@other", delay_s=5.0), 1900.0)
    assert state.hold == LeasedBy("lanes@other", 1905.0, 1)
    no_delay, _ = transition(SERVES, Blocked(by="lanes@other"), 1000.0)
    assert no_delay.hold == LeasedBy("lanes@other", None, 1) and next_wake(no_delay) is None


def test_a_persons_hold_outlives_the_lane_files_and_keeps_when_it_began() -> None:
    """`lanes suspend` is a person's hold in the lane's state: the lane file saying hands off too (each resync of
    a held lane) leaves it standing; said again in the same words it keeps its start; new words start anew."""
    held, _ = transition(STATES["healthy"], Suspended(by="alice", why="swapping a NIC"), 1000.0)
    assert held.suspension == SuspendedBy("alice", "swapping a NIC", None, 1000.0)
    again, _ = transition(held, Suspended(by="alice", why="swapping a NIC"), 1100.0)
    assert again.suspension is not None and again.suspension.since == 1000.0
    file_too, _ = transition(again, Suspended(by=LANE_FILE, why="suspended in its lane file"), 1200.0)
    assert file_too.suspension == again.suspension
    other, _ = transition(again, Suspended(by="alice", why="the NIC again"), 1300.0)
    assert other.suspension is not None and other.suspension.since == 1300.0
    assert transition(other, Observed(seen=Seen.READY), 1400.0)[0].suspension == other.suspension
    assert transition(other, Resumed(), 1500.0)[0].hold is None
    # The lane file's own hold is no person's: it lapses with the next news that is not a suspension.
    by_file, _ = transition(STATES["healthy"], Suspended(by=LANE_FILE, why="x"), 1000.0)
    assert by_file.suspension is None and isinstance(by_file.hold, SuspendedBy)
    assert transition(by_file, Observed(seen=Seen.READY), 1100.0)[0].hold is None


def test_a_lease_blocks_jitter_shortens_its_wait_within_the_curve() -> None:
    """Two reconcilers blocked on each other's leases draw different jitters and look again at different times,
    each within LEASE_JITTER below the curve, never above its cap."""
    waits = []
    for jitter in (0.0, 0.5, 0.999):
        state, _ = SERVES, ()
        for t in (1000.0, 1100.0, 1200.0, 1300.0, 1400.0, 1500.0, 1600.0):
            state, _ = transition(state, Blocked(by="lanes@other", delay_s=2.0, jitter=jitter), t)
        assert isinstance(state.hold, LeasedBy) and state.hold.at is not None
        waits.append(state.hold.at - 1600.0)
    assert waits[0] == LEASE_RETRY_MAX_S and waits[1] == LEASE_RETRY_MAX_S * (1 - LEASE_JITTER / 2)
    assert LEASE_RETRY_MAX_S * (1 - LEASE_JITTER) < waits[2] < waits[1] < waits[0]
