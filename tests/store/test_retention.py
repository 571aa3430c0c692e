"""Journal durability (synchronous=FULL) and retention: old rows go, what status and history need stays."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from reconciler.store.journal import Store
from reconciler.store.retention import DAY_S, Retention, prune
from reconciler.store.sqlite import CACHE_KIB, open_db
from reconciler.store.status import status_rows
from reconciler.store.trust import set_anchor

pytestmark = pytest.mark.timeout(30)

LATER = time.time() + 400 * DAY_S
"""A clock 400 days on: every row written now is older than any retention below."""


def _statements(store: Store) -> list[str]:
    seen: list[str] = []
    store.db.conn.set_trace_callback(seen.append)
    return seen


def test_step_records_applies_and_decisions_commit_with_synchronous_full(tmp_path: Path) -> None:
    """FULL: the WAL is synced at each of these commits, so a journaled step survives a power cut, not only a kill."""
    store = Store(tmp_path / "lanes.db")
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    seen = _statements(store)
    step = store.step_started("r1", "a", "c1", 0, "start", {})
    store.step_finished(step)
    store.record_apply("r1", "a", "c1", "fp", "applied", None, time.time(), {})
    store.record_commit("c1", "applied", {})
    writes = [s.split()[0].upper() for s in seen if not s.upper().startswith(("PRAGMA", "SELECT"))]
    syncs = [s for s in seen if s.upper().startswith("PRAGMA SYNCHRONOUS")]
    assert writes and syncs == ["PRAGMA synchronous=FULL", "PRAGMA synchronous=NORMAL"] * 4, seen
    # Each durable write sits between the two pragmas.
    marks = [i for i, s in enumerate(seen) if s.upper().startswith("PRAGMA SYNCHRONOUS")]
    for start, end in zip(marks[::2], marks[1::2], strict=True):
        assert any(not s.upper().startswith(("PRAGMA", "SELECT")) for s in seen[start + 1 : end])
    assert store.db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL again for the rest


def test_lane_records_rewritten_every_cycle_stay_normal(tmp_path: Path) -> None:
    store = Store(tmp_path / "lanes.db")
    seen = _statements(store)
    store.update_lane("a", health="healthy")
    assert not [s for s in seen if "synchronous" in s.lower()]
    assert open_db(tmp_path / "other.db").execute("PRAGMA synchronous").fetchone()[0] == 1


def test_the_journal_keeps_a_small_page_cache_of_its_own(tmp_path: Path) -> None:
    """sqlite's default 2 MB cache was daemon RSS (issue 27); the kernel's page cache holds the pages anyway."""
    assert open_db(tmp_path / "lanes.db").execute("PRAGMA cache_size").fetchone()[0] == -CACHE_KIB
    assert CACHE_KIB < 2000


def _apply(store: Store, lane: str, commit: str, result: str) -> str:
    run = store.new_run()
    step = store.step_started(run, lane, commit, 0, "start", {})
    store.step_finished(step)
    store.record_apply(run, lane, commit, "fp", result, None, time.time(), {})
    return run


def _history(store: Store) -> Store:
    """lane a: applied c1, failed c2, applied c3 (healthy), failed c4; lane b: applied b1, stopped b2."""
    for sha, lane, result in [
        ("c1", "a", "applied"),
        ("c2", "a", "rolled-back"),
        ("c3", "a", "applied"),
        ("c4", "a", "rolled-back"),
        ("b1", "b", "applied"),
        ("b2", "b", "stopped"),
    ]:
        _apply(store, lane, sha, result)
        store.record_commit(sha, "applied", {})
    store.update_lane("a", health="healthy", applied_commit="c3", healthy_commit="c3", desired_commit="c4")
    store.update_lane("b", health="stopped", applied_commit="b2", healthy_commit="b1", desired_commit="b2")
    return store


def test_old_rows_go_and_what_status_and_history_need_stays(tmp_path: Path) -> None:
    store = _history(Store(tmp_path / "lanes.db"))
    before = status_rows(store, None)
    pruned = prune(store, Retention(journal_days=30, applies_days=90, commits_days=90), now=LATER)

    kept = {(r["lane"], r["commit"], r["result"]) for r in store.applies()}
    assert kept == {
        ("a", "c3", "applied"),  # the last healthy, and the commit the lane runs
        ("a", "c4", "rolled-back"),  # the newest
        ("b", "b1", "applied"),  # the last healthy
        ("b", "b2", "stopped"),  # the newest, and the commit the lane runs
    }
    assert pruned.applies == 2
    runs = {r["run"] for r in store.applies()}
    assert {r["run"] for r in store.journal()} == runs
    assert pruned.journal == 2
    assert {r["sha"] for r in store.db.table("commits").rows} == {"c3", "c4", "b1", "b2"}
    assert pruned.commits == 2
    assert status_rows(store, None) == before


def test_recent_rows_and_steps_in_flight_stay(tmp_path: Path) -> None:
    store = _history(Store(tmp_path / "lanes.db"))
    in_flight = store.step_started(store.new_run(), "a", "c5", 0, "pull", {})
    assert prune(store, Retention(), now=time.time() + DAY_S) == prune(store, Retention())
    assert len(store.applies()) == 6 and len(store.journal()) == 7
    prune(store, Retention(journal_days=1, applies_days=1, commits_days=1), now=LATER)
    assert [r["id"] for r in store.in_flight()] == [in_flight]


def test_zero_days_keeps_a_table_whole(tmp_path: Path) -> None:
    store = _history(Store(tmp_path / "lanes.db"))
    pruned = prune(store, Retention(journal_days=0, applies_days=0, commits_days=0), now=LATER)
    assert (pruned.journal, pruned.applies, pruned.commits) == (0, 0, 0)
    assert len(store.applies()) == 6 and len(store.journal()) == 6


def test_the_trusted_commit_and_the_newest_decision_stay(tmp_path: Path) -> None:
    store = Store(tmp_path / "lanes.db")
    store.record_commit("old-trusted", "applied", {})
    store.record_commit("old-other", "denied", {})
    store.record_commit("newest", "denied", {})
    set_anchor(store, "old-trusted")
    prune(store, Retention(commits_days=1), now=LATER)
    assert {r["sha"] for r in store.db.table("commits").rows} == {"old-trusted", "newest"}


def test_an_empty_store_prunes_nothing(tmp_path: Path) -> None:
    pruned = prune(Store(tmp_path / "lanes.db"), Retention(), now=LATER)
    assert (pruned.journal, pruned.applies, pruned.commits, pruned.skipped) == (0, 0, 0, None)
