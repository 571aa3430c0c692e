"""A failed spec held back does not hide drift of the healthy spec serving in its place (pure planner).

After a rollback the lane serves the spec that last passed its gate while the failed spec is condemned
or waits out a backoff. A rank of that healthy spec that is removed or exited is put back, as that spec
and gated where it passed before; the held spec is never what is started.
"""

from __future__ import annotations

import pytest

from reconciler.facts.observed import ObservedFleet
from reconciler.plan.steps import Cause, DriftKind, Serving, StartRanks, StopContainers, WaitReady, fingerprint
from reconciler.spec.load import DesiredState
from tests.plan.test_planner import converge, run
from tests.plan.test_planner_causes import _with_state, _without
from tests.support.example import EUGR, example_state, with_lane

pytestmark = pytest.mark.timeout(30)


def _setup() -> tuple[DesiredState, ObservedFleet, Serving, str]:
    desired = example_state()
    first, applied = converge(desired)
    old = first.lane(EUGR)
    assert old is not None
    gate = WaitReady("dgx5", 8000, "served")
    serving = Serving(fingerprint(old.specs), old.specs, gate, "a" * 40)
    changed = with_lane(desired, EUGR, max_num_seqs=4)  # the spec that failed and was rolled back
    held_fp = run(changed, applied).lane(EUGR).fingerprint  # type: ignore[union-attr]
    assert held_fp is not None and held_fp != serving.fingerprint
    return changed, applied, serving, held_fp


@pytest.mark.parametrize("hold", ["condemned", "backoff"])
def test_a_removed_rank_of_the_healthy_spec_is_put_back_as_that_spec(hold: str) -> None:
    changed, applied, serving, held_fp = _setup()
    rank = f"lanes-{EUGR}-r2"
    observed = _without(applied, "dgx7", rank)
    holds = {"failed": {EUGR: held_fp}} if hold == "condemned" else {"retry_at": {EUGR: (held_fp, 2000.0)}}
    lp = run(changed, observed, serving={EUGR: serving}, clock=1000.0, **holds).lane(EUGR)
    assert lp is not None and (lp.action, lp.cause) == ("deploy", Cause.RESTORED_DRIFT)
    assert lp.fingerprint == serving.fingerprint and lp.specs == serving.specs
    assert [(d.kind, d.host, d.container) for d in lp.drift] == [(DriftKind.MISSING, "dgx7", rank)]
    assert f"{rank} missing on dgx7" in lp.reason and held_fp in lp.reason
    (start,) = [s for s in lp.steps if isinstance(s, StartRanks)]
    assert start.ranks == serving.specs  # the healthy spec's ranks, never the held spec's
    assert lp.steps[-1] == serving.gate
    (stop,) = [s for s in lp.steps if isinstance(s, StopContainers)]
    assert {(c.host, c.name) for c in stop.containers} == {("dgx5", f"lanes-{EUGR}-r0"), ("dgx6", f"lanes-{EUGR}-r1")}


def test_an_exited_rank_is_repaired_and_a_healthy_spec_running_as_recorded_is_only_held() -> None:
    changed, applied, serving, held_fp = _setup()
    exited = _with_state(applied, "dgx5", f"lanes-{EUGR}-r0", "exited", 137)
    lp = run(changed, exited, serving={EUGR: serving}, failed={EUGR: held_fp}).lane(EUGR)
    assert lp is not None and lp.cause == Cause.RESTORED_DRIFT
    assert [d.kind for d in lp.drift] == [DriftKind.STOPPED] and "exit code 137" in lp.reason
    as_recorded = run(changed, applied, serving={EUGR: serving}, failed={EUGR: held_fp}).lane(EUGR)
    assert as_recorded is not None and (as_recorded.action, as_recorded.cause) == ("blocked", Cause.CONDEMNED)


def test_nothing_is_repaired_without_a_healthy_spec_apart_from_the_held_one() -> None:
    changed, applied, serving, held_fp = _setup()
    observed = _without(applied, "dgx7", f"lanes-{EUGR}-r2")
    alone = run(changed, observed, failed={EUGR: held_fp}).lane(EUGR)  # no record of what serves
    assert alone is not None and (alone.action, alone.cause) == ("blocked", Cause.CONDEMNED)
    same = Serving(held_fp, serving.specs, serving.gate)  # what "serves" is the condemned spec itself
    itself = run(changed, observed, serving={EUGR: same}, failed={EUGR: held_fp}).lane(EUGR)
    assert itself is not None and (itself.action, itself.cause) == ("blocked", Cause.CONDEMNED)
