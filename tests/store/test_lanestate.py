"""A lane's typed state in the journal (`reconciler.store.lanestate`, `reconciler.store.lanewriter`).

One row per lane holds the whole `LaneState`: every state of the machine's table comes back as it was
written; a journal from before the typed state opens, gains its columns, and reads as the state its older
columns described (a condemned spec, a backoff, a change window, the healthy spec); and the writer runs the
events through the machine and writes what it ends in, once.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

import pytest

from reconciler.lane import (
    Backoff,
    Condemned,
    Gate,
    LaneHealth,
    LaneState,
    Phase,
    Serving,
    Started,
    StepFailed,
    TxKind,
    Wanted,
    Window,
)
from reconciler.store.journal import Store
from reconciler.store.lanerecord import TYPED_LANE_COLUMNS
from reconciler.store.lanestate import fields_from_state, state_from_record
from reconciler.store.lanewriter import current, record, retry
from tests.lane.test_machine_table import STATES

pytestmark = pytest.mark.timeout(30)

# The lanes table as the release before the typed state made it (tests/store/test_journal.py has the first one's).
BEFORE_TYPED = """
create table lanes (name text primary key, desired text, health text, desired_commit text, applied_commit text,
                    hosts text, fingerprint text, last_error text, failed_fingerprint text, healthy_specs text,
                    healthy_commit text, updated float, timings text, evidence text, retry_at float,
                    transient_failures integer, drift text, healthy_gate text, retry_fingerprint text,
                    held_until float, staging text, swap_undone text);
"""
SPEC = {"host": "dgx1", "name": "lanes-prod-0", "image": "vllm@sha256:" + "a" * 64}


@pytest.mark.parametrize("name", [n for n in STATES if n != "new"])  # "new" has no row: nothing happened to it
def test_every_state_of_the_machine_comes_back_from_its_row(tmp_path: Path, name: str) -> None:
    store = Store(tmp_path / "lanes.db")
    try:
        store.update_lane("prod", **fields_from_state(STATES[name]))
        assert state_from_record(store.lane("prod")) == STATES[name]
    finally:
        store.close()


def _older_journal(path: Path, **row: object) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.executescript(BEFORE_TYPED)
        cols = ", ".join(row)
        conn.execute(f"insert into lanes ({cols}) values ({', '.join('?' * len(row))})", list(row.values()))
        conn.commit()


def test_a_journal_from_before_the_typed_state_reads_as_the_state_it_described(tmp_path: Path) -> None:
    path = tmp_path / "lanes.db"
    gate = {"host": "dgx1", "port": 8000, "served_model": "prod"}
    _older_journal(
        path, name="prod", desired="running", health="degraded", desired_commit="c2", applied_commit="c1",
        hosts=json.dumps(["dgx1"]), fingerprint="fp-good", last_error="gate failed", failed_fingerprint="fp-bad",
        healthy_specs=json.dumps([SPEC]), healthy_commit="c1", updated=50.0, healthy_gate=json.dumps(gate),
        transient_failures=0, held_until=900.0,
    )  # fmt: skip
    _older_journal(
        tmp_path / "other.db", name="nightly", desired="running", health="degraded", fingerprint=None,
        retry_fingerprint="fp-pull", retry_at=1200.0, transient_failures=2, updated=60.0,
    )  # fmt: skip
    store, other = Store(path), Store(tmp_path / "other.db")
    try:
        with contextlib.closing(sqlite3.connect(path)) as conn:
            have = {row[1] for row in conn.execute("pragma table_info(lanes)")}
        assert set(TYPED_LANE_COLUMNS) <= have
        state = state_from_record(store.lane("prod"))
        assert state.health == LaneHealth.DEGRADED
        assert state.wanted == Wanted("running", "c2", ("dgx1",))
        assert state.hold == Condemned("fp-bad")  # the failed spec before the window: it outlasts any window
        assert state.serving == "fp-good"
        assert state.healthy == Serving("fp-good", (SPEC,), Gate("dgx1", 8000, "prod"), "c1")
        assert state.error is not None and state.error.message == "gate failed" and state.error.at == 50.0
        assert state.transaction is None
        assert state_from_record(other.lane("nightly")).hold == Backoff("fp-pull", 1200.0, 2)
    finally:
        store.close()
        other.close()


def test_a_window_alone_in_an_older_row_is_the_lanes_hold(tmp_path: Path) -> None:
    path = tmp_path / "lanes.db"
    _older_journal(path, name="prod", desired="running", health="healthy", held_until=900.0, updated=1.0)
    store = Store(path)
    try:
        assert current(store, "prod").hold == Window(900.0)
    finally:
        store.close()


def test_the_writer_runs_events_through_the_machine_and_writes_once(tmp_path: Path) -> None:
    store = Store(tmp_path / "lanes.db")
    try:
        seen: list[LaneState] = []
        started = Started(kind=TxKind.DEPLOY, fingerprint="fp-new", commit="c2", wanted=Wanted("running", "c2"))
        failed = StepFailed(touched=False, transient=True, delay_s=30.0, why="registry 503")
        state, _ = record(store, "prod", started, failed, now=1000.0, journal=seen.append)
        assert seen == [state]  # the apply row's hook sees the state before it is written
        rec = store.lane("prod")
        assert rec is not None and rec.retry_fingerprint == "fp-new" and rec.retry_at == 1030.0
        assert rec.last_error == "registry 503 (a passing fault: tried again in 30 s)"
        assert state_from_record(rec) == state
        assert retry(store, "prod") and current(store, "prod").hold is None
        assert not retry(store, "prod")  # nothing held it back any more
    finally:
        store.close()


def test_a_transaction_an_earlier_process_left_is_not_in_flight(tmp_path: Path) -> None:
    path = tmp_path / "lanes.db"
    first = Store(path)
    record(first, "prod", Started(kind=TxKind.DEPLOY, fingerprint="fp", commit="c1", phase=Phase.GATING))
    assert current(first, "prod").transaction is not None
    first.close()
    again = Store(path)  # a daemon killed mid-gate, started again
    try:
        state = current(again, "prod")
        assert state.transaction is None and state.health == LaneHealth.PROGRESSING  # the next resync gates it
    finally:
        again.close()
