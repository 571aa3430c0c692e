"""What the planner is told serves in place of a failed spec (`reconciler.plan.known`): read from the lanes'
states, as the journal's rows give them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconciler.plan.known import known
from reconciler.plan.specjson import spec_to_json
from reconciler.plan.steps import Serving, WaitReady, fingerprint
from reconciler.store.lanerecord import LaneRecord
from reconciler.store.lanestate import state_from_record
from tests.plan.test_planner import converge
from tests.support.example import EUGR, example_state

pytestmark = pytest.mark.timeout(30)


def serving_specs(records: list[LaneRecord]) -> dict[str, Serving]:
    return dict(known({rec.name: state_from_record(rec) for rec in records}).serving)


def _held() -> LaneRecord:
    first, _ = converge(example_state())
    lp = first.lane(EUGR)
    assert lp is not None
    return LaneRecord(
        EUGR, "running", "degraded", "c2", "c1", ("dgx5", "dgx6", "dgx7"),
        fingerprint(lp.specs), "failed", "condemned-fp",
        [spec_to_json(h, s) for h, s in lp.specs], "c1" * 20, 0.0, {}, {},
        healthy_gate={"host": "dgx5", "port": 8000, "served_model": "m"},
    )  # fmt: skip


def test_a_rolled_back_lane_serving_its_healthy_spec_is_told_with_its_gate() -> None:
    rec = _held()
    serving = serving_specs([rec])[EUGR]
    assert serving.fingerprint == rec.fingerprint and serving.commit == rec.healthy_commit
    assert [h for h, _ in serving.specs] == ["dgx5", "dgx6", "dgx7"]
    assert serving.gate == WaitReady("dgx5", 8000, "m")
    in_backoff = replace(rec, failed_fingerprint=None, retry_fingerprint="flapping-fp", retry_at=1.0)
    assert EUGR in serving_specs([in_backoff])


def test_nothing_is_told_where_nothing_failed_nothing_serves_or_the_record_does_not_add_up() -> None:
    rec = _held()
    assert serving_specs([replace(rec, failed_fingerprint=None)]) == {}  # nothing held back: no repair to do
    assert serving_specs([replace(rec, fingerprint=None)]) == {}  # the rollback brought nothing back
    assert serving_specs([replace(rec, fingerprint="another")]) == {}  # not the healthy specs that run
    assert serving_specs([replace(rec, healthy_gate=None)]) == {}  # nowhere to gate a repair
