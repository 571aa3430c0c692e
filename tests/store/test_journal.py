"""The journal (`reconciler.store.journal.Store`) on its own: a sqlite file, no hosts, no daemon.

What the rest of lanes relies on: a journal written by an older lanes opens and gains what is new
without losing a row; every step is written before it runs and closed after; a lane record comes back
as it was written, JSON fields included; a condemned spec is known until `lanes retry`; a commit's
outcome and each apply are kept; and when the disk refuses writes the daemon's store holds them, in
order, until it takes them again, while the CLI's store says so with an error.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.errors import TransientError
from reconciler.store.journal import LaneRecord, Store
from tests.support.disk import checkpoint_wal, fill, small_disk
from tests.support.example import EUGR, PRODUCTION

pytestmark = pytest.mark.timeout(30)

# The tables of the first lanes release: no `evidence` (nor anything later) on lanes, no cause or drift on applies.
OLD_SCHEMA = """
create table journal (id integer primary key, run text, lane text, [commit] text, seq integer, kind text,
                      detail text, state text, started float, finished float, error text);
create table lanes (name text primary key, desired text, health text, desired_commit text, applied_commit text,
                    hosts text, fingerprint text, last_error text, failed_fingerprint text, healthy_specs text,
                    healthy_commit text, updated float, timings text);
create table commits (sha text primary key, outcome text, detail text, time float);
create table applies (id integer primary key, run text, lane text, [commit] text, fingerprint text, result text,
                      error text, started float, finished float, timings text, logs text);
"""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "lanes.db")
    try:
        yield s
    finally:
        s.close()


def trouble(store: Store) -> tuple[str | None, float | None, int]:
    """Why writes are held, since when, and how many."""
    return store.problem, store.problem_since, store.held_writes


def columns(path: Path, table: str) -> set[str]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return {row[1] for row in conn.execute(f"pragma table_info({table})")}


# -- an older journal -------------------------------------------------------------------


def test_a_journal_from_an_older_lanes_gains_the_new_columns_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "lanes.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.executescript(OLD_SCHEMA)
        conn.execute(
            "insert into lanes (name, desired, health, applied_commit, hosts, fingerprint, healthy_specs, timings)"
            " values (?, 'running', 'healthy', 'c1', '[\"dgx1\", \"dgx2\"]', 'fp1', '[{\"name\": \"r0\"}]',"
            " '{\"to_ready\": 12.5}')",
            (PRODUCTION,),
        )
        conn.execute(
            "insert into journal (run, lane, [commit], seq, kind, detail, state, started)"
            " values ('run0', ?, 'c1', 0, 'lease', '{}', 'started', 1.0)",
            (PRODUCTION,),
        )
        conn.execute("insert into commits values ('c1', 'applied', '{\"lanes\": []}', 2.0)")
        conn.execute(
            "insert into applies (run, lane, [commit], fingerprint, result, started, finished, timings, logs)"
            " values ('run0', ?, 'c1', 'fp1', 'applied', 1.0, 3.0, '{}', '{}')",
            (PRODUCTION,),
        )
        conn.commit()
    assert "evidence" not in columns(path, "lanes")

    store = Store(path)
    try:
        assert {"evidence", "swap_undone"} <= columns(path, "lanes")
        # What the old lanes wrote reads as it was, the new fields empty.
        rec = store.lane(PRODUCTION)
        assert rec is not None
        assert (rec.health, rec.applied_commit, rec.hosts, rec.fingerprint) == (
            "healthy",
            "c1",
            ("dgx1", "dgx2"),
            "fp1",
        )
        assert rec.healthy_specs == [{"name": "r0"}] and rec.timings == {"to_ready": 12.5}
        assert rec.evidence == {} and rec.swap_undone is None
        assert [(r["kind"], r["state"]) for r in store.in_flight()] == [("lease", "started")]
        assert (store.commit_outcome("c1") or {}).get("outcome") == "applied"
        assert [(a["lane"], a["result"]) for a in store.applies()] == [(PRODUCTION, "applied")]
        # And what the new lanes writes fits.
        store.update_lane(PRODUCTION, evidence={"pp": "pp512 1000 t/s"})
        store.record_apply("run1", PRODUCTION, "c2", "fp2", "applied", None, time.time(), {})
    finally:
        store.close()

    again = Store(path)  # a second open migrates nothing and loses nothing
    try:
        rec = again.lane(PRODUCTION)
        assert rec is not None and rec.evidence == {"pp": "pp512 1000 t/s"} and rec.applied_commit == "c1"
        assert [a["commit"] for a in again.applies(PRODUCTION)] == ["c2", "c1"]
    finally:
        again.close()


# -- steps ------------------------------------------------------------------------------


def test_a_step_is_journaled_as_started_before_it_runs_and_closed_after(store: Store) -> None:
    run = store.new_run()
    assert run != store.new_run()
    before = time.time()
    lease = store.step_started(run, PRODUCTION, "c1", 0, "lease", {"hosts": ["dgx1", "dgx2"], "ttl": 60})
    pull = store.step_started(run, PRODUCTION, "c1", 1, "pull", {"image": "repo@sha256:" + "a" * 64})
    assert 0 < lease < pull

    started = store.in_flight()
    assert [(r["id"], r["run"], r["lane"], r["commit"], r["seq"], r["kind"]) for r in started] == [
        (lease, run, PRODUCTION, "c1", 0, "lease"),
        (pull, run, PRODUCTION, "c1", 1, "pull"),
    ]
    assert json.loads(started[0]["detail"]) == {"hosts": ["dgx1", "dgx2"], "ttl": 60}
    assert all(r["state"] == "started" and r["started"] >= before and r["finished"] is None for r in started)

    store.step_finished(lease)
    store.step_finished(pull, error="registry down")
    assert store.in_flight() == []
    by_kind = {r["kind"]: r for r in store.journal(PRODUCTION)}
    assert (by_kind["lease"]["state"], by_kind["lease"]["error"]) == ("done", None)
    assert (by_kind["pull"]["state"], by_kind["pull"]["error"]) == ("failed", "registry down")
    assert all(r["finished"] >= r["started"] for r in by_kind.values())


def test_the_journal_reads_newest_first_by_lane_and_up_to_a_limit(store: Store) -> None:
    run = store.new_run()
    for seq, kind in enumerate(("lease", "pull", "stop", "start")):
        store.step_finished(store.step_started(run, PRODUCTION, "c1", seq, kind, {}))
    store.step_started(run, EUGR, "c1", 0, "lease", {})
    assert [r["kind"] for r in store.journal(PRODUCTION)] == ["start", "stop", "pull", "lease"]
    assert [r["kind"] for r in store.journal(PRODUCTION, limit=2)] == ["start", "stop"]
    assert [r["lane"] for r in store.journal()] == [EUGR] + [PRODUCTION] * 4


def test_closing_what_a_killed_process_left_in_flight_touches_only_that_lane(store: Store) -> None:
    run = store.new_run()
    store.step_finished(store.step_started(run, PRODUCTION, "c1", 0, "lease", {}))
    prod_pull = store.step_started(run, PRODUCTION, "c1", 1, "pull", {})
    eugr_lease = store.step_started(run, EUGR, "c1", 0, "lease", {})

    store.close_in_flight(PRODUCTION, "abandoned: the daemon restarted")
    assert [r["id"] for r in store.in_flight()] == [eugr_lease]
    states = {(r["lane"], r["kind"]): (r["state"], r["error"]) for r in store.journal()}
    assert states == {
        (PRODUCTION, "lease"): ("done", None),
        (PRODUCTION, "pull"): ("abandoned", "abandoned: the daemon restarted"),
        (EUGR, "lease"): ("started", None),
    }
    assert next(r for r in store.journal() if r["id"] == prod_pull)["finished"] is not None


# -- lane records -----------------------------------------------------------------------


def test_a_lane_record_reads_back_as_written_json_fields_included(store: Store) -> None:
    specs = [{"name": f"lanes-{PRODUCTION}-r0", "host": "dgx1", "env": {"NCCL_SOCKET_IFNAME": "enp1s0f1np1"}}]
    before = time.time()
    store.update_lane(
        PRODUCTION,
        desired="running",
        health="healthy",
        desired_commit="c2",
        applied_commit="c2",
        hosts=("dgx1", "dgx2", "dgx3", "dgx4"),
        fingerprint="fp2",
        healthy_specs=specs,
        healthy_commit="c2",
        timings={"to_port": 1.5, "to_ready": 40.25},
        evidence={"pp": "pp512 4100 t/s", "tg": "tg32 58 t/s", "regression": False},
    )
    rec = store.lane(PRODUCTION)
    assert isinstance(rec, LaneRecord)
    assert (rec.name, rec.desired, rec.health, rec.desired_commit, rec.applied_commit) == (
        PRODUCTION,
        "running",
        "healthy",
        "c2",
        "c2",
    )
    assert rec.hosts == ("dgx1", "dgx2", "dgx3", "dgx4")
    assert (rec.fingerprint, rec.healthy_commit, rec.last_error, rec.failed_fingerprint) == ("fp2", "c2", None, None)
    assert rec.healthy_specs == specs
    assert rec.timings == {"to_port": 1.5, "to_ready": 40.25}
    assert rec.evidence == {"pp": "pp512 4100 t/s", "tg": "tg32 58 t/s", "regression": False}
    assert before <= rec.updated <= time.time()

    # An update changes what it names and keeps the rest.
    store.update_lane(PRODUCTION, health="degraded", last_error="dgx3: unreachable")
    rec = store.lane(PRODUCTION)
    assert rec is not None
    assert (rec.health, rec.last_error, rec.applied_commit, rec.hosts) == (
        "degraded",
        "dgx3: unreachable",
        "c2",
        ("dgx1", "dgx2", "dgx3", "dgx4"),
    )
    assert rec.healthy_specs == specs and rec.evidence["tg"] == "tg32 58 t/s"

    # The same from another connection: it is on disk, not only in this object.
    other = Store(store.path)
    try:
        assert other.lane(PRODUCTION) == rec
    finally:
        other.close()


def test_a_new_lane_has_defaults_and_an_unknown_lane_has_no_record(store: Store) -> None:
    assert store.lane(PRODUCTION) is None and store.lanes() == []
    store.update_lane(PRODUCTION, desired_commit="c1")
    rec = store.lane(PRODUCTION)
    assert rec is not None
    assert (rec.desired, rec.health, rec.applied_commit, rec.hosts) == ("running", "progressing", None, ())
    assert (rec.healthy_specs, rec.timings, rec.evidence) == ([], {}, {})
    assert store.lane(EUGR) is None


def test_lanes_lists_every_record_by_name(store: Store) -> None:
    for name in (PRODUCTION, EUGR, "a-lane-first-by-name"):
        store.update_lane(name, health="healthy", hosts=[f"{name}-host"])
    assert [r.name for r in store.lanes()] == sorted([PRODUCTION, EUGR, "a-lane-first-by-name"])
    assert {r.name: r.hosts for r in store.lanes()}[EUGR] == (f"{EUGR}-host",)


# -- condemned specs ----------------------------------------------------------------------


def test_a_failed_spec_is_known_until_lanes_retry_clears_it(store: Store) -> None:
    store.update_lane(PRODUCTION, health="degraded", failed_fingerprint="fp-bad")
    store.update_lane(EUGR, health="healthy", fingerprint="fp-good")
    assert store.failed_fingerprints() == {PRODUCTION: "fp-bad"}

    assert store.clear_failed(PRODUCTION) is True
    rec = store.lane(PRODUCTION)
    assert rec is not None and rec.failed_fingerprint is None and rec.health == "degraded"
    assert store.failed_fingerprints() == {}
    assert store.clear_failed(PRODUCTION) is False  # nothing left to clear
    assert store.clear_failed(EUGR) is False  # never failed
    assert store.clear_failed("no-such-lane") is False


def test_lanes_retry_also_ends_the_backoff_of_a_spec_that_failed_on_a_passing_fault(store: Store) -> None:
    store.update_lane(EUGR, health="degraded", retry_fingerprint="fp-pull", retry_at=time.time() + 600)
    assert store.failed_fingerprints() == {} and set(store.retry_schedule()) == {EUGR}
    assert store.clear_failed(EUGR) is True
    assert store.retry_schedule() == {}
    rec = store.lane(EUGR)
    assert rec is not None and (rec.retry_fingerprint, rec.retry_at) == (None, None)


# -- commits ------------------------------------------------------------------------------


def test_what_was_decided_about_a_commit_is_kept_and_the_last_decision_wins(store: Store) -> None:
    assert store.commit_outcome("c1") is None
    before = time.time()
    store.record_commit("c1", "denied", {"lanes": [{"lane": PRODUCTION, "rule": "image-digest"}]})
    outcome = store.commit_outcome("c1")
    assert outcome is not None
    assert (outcome["sha"], outcome["outcome"]) == ("c1", "denied")
    assert outcome["detail"] == {"lanes": [{"lane": PRODUCTION, "rule": "image-digest"}]}
    assert before <= outcome["time"] <= time.time()

    store.record_commit("c1", "applied", {"lanes": []})
    assert (store.commit_outcome("c1") or {}).get("outcome") == "applied"
    assert store.commit_outcome("c2") is None


# -- applies ------------------------------------------------------------------------------


def test_every_apply_is_kept_newest_first_with_its_timings_and_logs(store: Store) -> None:
    t0 = time.time()
    store.record_apply("run1", PRODUCTION, "c1", "fp1", "applied", None, t0, {"to_ready": 30.0})
    store.record_apply(
        "run2", PRODUCTION, "c2", "fp2", "rolled-back", "health: 503", t0, {}, {"lanes-x-r0@dgx1": "last log lines"}
    )
    store.record_apply("run2", EUGR, "c2", "fp3", "applied", None, t0, {})

    prod = store.applies(PRODUCTION)
    assert [(a["run"], a["commit"], a["fingerprint"], a["result"], a["error"]) for a in prod] == [
        ("run2", "c2", "fp2", "rolled-back", "health: 503"),
        ("run1", "c1", "fp1", "applied", None),
    ]
    assert json.loads(prod[1]["timings"]) == {"to_ready": 30.0} and json.loads(prod[1]["logs"]) == {}
    assert json.loads(prod[0]["logs"]) == {"lanes-x-r0@dgx1": "last log lines"}
    assert all(a["started"] == t0 and t0 <= a["finished"] <= time.time() for a in prod)
    assert [a["lane"] for a in store.applies()] == [EUGR, PRODUCTION, PRODUCTION]
    assert len(store.applies(limit=1)) == 1


def test_what_a_spec_last_failed_with_is_its_newest_failed_or_rolled_back_apply(store: Store) -> None:
    t0 = time.time()
    store.record_apply("run1", PRODUCTION, "c1", "fp1", "rolled-back", "gate: 503", t0, {})
    store.record_apply("run2", PRODUCTION, "c2", "fp1", "failed", "pull refused", t0, {})
    store.record_apply("run3", PRODUCTION, "c3", "fp1", "blocked", "leased by someone", t0, {})
    store.record_apply("run4", PRODUCTION, "c3", "fp2", "rolled-back", "another spec", t0, {})
    store.record_apply("run5", EUGR, "c3", "fp1", "failed", "another lane", t0, {})
    assert store.failure_of(PRODUCTION, "fp1") == "pull refused"  # not the blocked row, another spec or lane
    assert store.failure_of(PRODUCTION, "fp9") is None and store.failure_of(PRODUCTION, None) is None


def test_the_swap_a_lanes_failure_undid_is_a_field_of_its_own(store: Store) -> None:
    store.update_lane(PRODUCTION, last_error="gate failed; swap rolled back: x serves again", swap_undone="x back")
    rec = store.lane(PRODUCTION)
    assert rec is not None and rec.swap_undone == "x back"
    store.update_lane(PRODUCTION, last_error="anything else")  # the words change; the field stays until cleared
    assert store.lane(PRODUCTION).swap_undone == "x back"  # type: ignore[union-attr]
    store.update_lane(PRODUCTION, swap_undone=None)
    assert store.lane(PRODUCTION).swap_undone is None  # type: ignore[union-attr]


def test_the_retry_schedule_reads_held_rows_as_they_will_be(tmp_path: Path) -> None:
    """`retry_schedule` reads two columns, not every lane's record (it runs after each operation), and says
    what the records say: a backoff on disk that a held write ended is gone, a held new one is there."""
    store = Store(tmp_path / "lanes.db", hold_writes=True)
    soon = time.time() + 600
    store.update_lane(EUGR, health="degraded", retry_fingerprint="fp-pull", retry_at=soon)
    store.update_lane(PRODUCTION, health="healthy")
    assert store.retry_schedule() == {EUGR: ("fp-pull", soon)}
    pages = store.db.execute("pragma page_count").fetchone()[0]
    store.db.execute(f"pragma max_page_count = {pages}")
    store.step_started("run1", PRODUCTION, "c2", 0, "lease", {"describe": "x" * 20_000})  # refused: now held
    store.update_lane(EUGR, health="healthy", retry_fingerprint=None, retry_at=None)
    store.update_lane(PRODUCTION, health="degraded", retry_fingerprint="fp-new", retry_at=soon + 1)
    assert store.held_writes
    from_records = {
        r.name: (r.retry_fingerprint, r.retry_at) for r in store.lanes() if r.retry_fingerprint and r.retry_at
    }
    assert store.retry_schedule() == from_records == {PRODUCTION: ("fp-new", soon + 1)}

    def no_records(row: object) -> None:
        raise AssertionError("the schedule decoded a lane's whole record")

    store._record = no_records  # type: ignore[assignment,method-assign]
    assert store.retry_schedule() == from_records


# -- a disk that refuses writes -------------------------------------------------------------


def test_writes_the_database_refuses_are_held_in_order_and_written_once_it_takes_them(tmp_path: Path) -> None:
    """The same SQLITE_FULL a full disk gives, from sqlite's own page cap: runs without root or a tmpfs."""
    store = Store(tmp_path / "lanes.db", hold_writes=True)
    store.update_lane(PRODUCTION, health="healthy", applied_commit="c1", desired_commit="c1")
    pages = store.db.execute("pragma page_count").fetchone()[0]
    store.db.execute(f"pragma max_page_count = {pages}")
    big = {"describe": "x" * 20_000}  # overflow pages: the insert needs room the cap does not give

    first = store.step_started("run1", PRODUCTION, "c2", 0, "lease", big)
    assert first < 0 and store.held_writes == 1 and "database or disk is full" in (store.problem or "")
    store.update_lane(PRODUCTION, health="progressing", desired_commit="c2")
    store.step_finished(first)
    second = store.step_started("run1", PRODUCTION, "c2", 1, "pull", {})
    store.step_finished(second, error="registry down")
    store.update_lane(PRODUCTION, health="degraded", last_error="registry down")
    store.record_commit("c2", "failed", {"lanes": []})
    assert not store.writable("me")  # the daemon's check before a cycle: nothing new starts

    # Reads see what is held; the file still holds the last good state, intact.
    rec = store.lane(PRODUCTION)
    assert rec is not None and (rec.health, rec.applied_commit, rec.desired_commit) == ("degraded", "c1", "c2")
    assert store.commit_outcome("c2") == {**(store.commit_outcome("c2") or {}), "outcome": "failed"}
    other = Store(tmp_path / "lanes.db")
    on_disk = other.lane(PRODUCTION)
    assert on_disk is not None and (on_disk.health, on_disk.desired_commit) == ("healthy", "c1")
    assert other.journal() == [] and other.commit_outcome("c2") is None
    assert other.db.execute("pragma integrity_check").fetchone()[0] == "ok"

    store.db.execute("pragma max_page_count = 1000000")
    assert store.writable("me") and store.problem is None and store.held_writes == 0
    steps = [(r["seq"], r["kind"], r["state"], r["error"]) for r in reversed(other.journal())]
    assert steps == [(0, "lease", "done", None), (1, "pull", "failed", "registry down")]
    on_disk = other.lane(PRODUCTION)
    assert on_disk is not None and (on_disk.health, on_disk.desired_commit, on_disk.last_error) == (
        "degraded",
        "c2",
        "registry down",
    )
    assert (other.commit_outcome("c2") or {})["outcome"] == "failed"
    other.close()
    store.close()

    cli = Store(tmp_path / "lanes.db")  # the CLI's store: a refused write is an error, not held
    cli.db.execute(f"pragma max_page_count = {cli.db.execute('pragma page_count').fetchone()[0]}")
    with pytest.raises(TransientError, match="disk is full"):
        cli.step_started("run2", PRODUCTION, "c3", 0, "lease", big)
    cli.close()


def test_a_full_disk_under_the_journal_holds_the_daemons_writes_and_fails_the_clis(tmp_path: Path) -> None:
    """A real file system filled to its last byte (a tmpfs; needs root, as CI runs), not a page cap."""
    with small_disk(tmp_path / "disk", size="4m") as disk:
        path = disk / "lanes.db"
        daemon = Store(path, hold_writes=True)
        try:
            daemon.update_lane(PRODUCTION, health="healthy", applied_commit="c1", hosts=["dgx1"])
            assert daemon.writable("lanes-test") and daemon.problem is None
            checkpoint_wal(path)
            filler = fill(disk)

            t0 = time.time()
            step = daemon.step_started("run1", PRODUCTION, "c2", 0, "lease", {"pad": "x" * 200_000})
            daemon.update_lane(PRODUCTION, health="progressing", desired_commit="c2", timings={"t": 1.0})
            daemon.step_finished(step)
            daemon.record_commit("c2", "applied", {"lanes": [PRODUCTION]})
            assert step < 0 and daemon.held_writes >= 3
            assert "database or disk is full" in (daemon.problem or "")
            assert daemon.problem_since is not None and t0 <= daemon.problem_since <= time.time()
            assert not daemon.flush() and not daemon.writable("lanes-test")
            rec = daemon.lane(PRODUCTION)
            assert rec is not None and (rec.health, rec.desired_commit, rec.applied_commit) == (
                "progressing",
                "c2",
                "c1",
            )
            assert (daemon.commit_outcome("c2") or {}).get("outcome") == "applied"

            # `lanes status` and `lanes retry` open the same file on the full disk: reading works, writing says why.
            cli = Store(path)
            try:
                on_disk = cli.lane(PRODUCTION)
                assert on_disk is not None and (on_disk.health, on_disk.desired_commit) == ("healthy", None)
                assert cli.in_flight() == [] and cli.commit_outcome("c2") is None
                with pytest.raises(TransientError, match="database or disk is full"):
                    cli.update_lane(PRODUCTION, failed_fingerprint=None)
            finally:
                cli.close()

            filler.unlink()
            assert daemon.flush() and daemon.writable("lanes-test")
            assert trouble(daemon) == (None, None, 0)
        finally:
            daemon.close()

        after = Store(path)
        try:
            rec = after.lane(PRODUCTION)
            assert rec is not None and (rec.health, rec.desired_commit, rec.timings) == (
                "progressing",
                "c2",
                {"t": 1.0},
            )
            assert [(r["kind"], r["state"]) for r in after.journal(PRODUCTION)] == [("lease", "done")]
            assert (after.commit_outcome("c2") or {}).get("outcome") == "applied"
            assert after.db.execute("pragma integrity_check").fetchone()[0] == "ok"
        finally:
            after.close()


def test_the_daemons_store_keeps_the_order_of_held_writes_across_lanes(tmp_path: Path) -> None:
    """A later write never overtakes a held one: an older upsert written after a newer one would undo it."""
    store = Store(tmp_path / "lanes.db", hold_writes=True)
    try:
        store.update_lane(PRODUCTION, health="healthy")
        pages = store.db.execute("pragma page_count").fetchone()[0]
        store.db.execute(f"pragma max_page_count = {pages}")
        store.step_started("run1", EUGR, "c2", 0, "lease", {"pad": "x" * 20_000})  # refused: held
        store.update_lane(PRODUCTION, health="degraded")  # would fit, but queues behind the held step
        store.update_lane(PRODUCTION, health="failed")
        assert store.held_writes == 3
        store.db.execute("pragma max_page_count = 1000000")
        assert store.flush()
        rec = store.lane(PRODUCTION)
        assert rec is not None and rec.health == "failed"
        assert [r["lane"] for r in store.journal()] == [EUGR]
    finally:
        store.close()
