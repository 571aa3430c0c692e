"""A lane's record is decoded once per change of its row (issue 27: a resync read each of 250 lanes' records
several times and decoded their JSON each time), and any change of the row, from this process or another
(a `lanes suspend` from the CLI writes the same file), reads back as written."""

from __future__ import annotations

from pathlib import Path

from reconciler.store.journal import Store

SPECS = [{"name": "lane-a-r0", "image": "vllm@sha256:" + "a" * 64, "command": ["serve", "m"]}]


def test_an_unchanged_row_gives_the_same_record_and_a_changed_one_what_was_written(tmp_path: Path) -> None:
    store = Store(tmp_path / "lanes.db")
    store.update_lane("a", health="healthy", healthy_specs=SPECS, fingerprint="fp1")
    store.update_lane("b", health="healthy", fingerprint="fpb")
    first = store.lane("a")
    assert first is not None and first.healthy_specs == SPECS
    assert store.lane("a") is first
    assert next(r for r in store.lanes() if r.name == "a") is first
    store.update_lane("a", health="degraded", last_error="the engine does not answer")
    again = store.lane("a")
    assert again is not None and again is not first
    assert (again.health, again.last_error, again.healthy_specs) == ("degraded", "the engine does not answer", SPECS)


def test_a_write_by_another_process_is_read_back(tmp_path: Path) -> None:
    daemon, cli = Store(tmp_path / "lanes.db"), Store(tmp_path / "lanes.db")
    daemon.update_lane("a", health="healthy", fingerprint="fp1")
    assert [r.fingerprint for r in daemon.lanes()] == ["fp1"]
    cli.update_lane("a", fingerprint="fp2", hold="suspended", hold_by="ops")
    seen = daemon.lane("a")
    assert seen is not None and (seen.fingerprint, seen.hold, seen.hold_by) == ("fp2", "suspended", "ops")
    assert [(r.fingerprint, r.hold) for r in daemon.lanes()] == [("fp2", "suspended")]


def test_a_deleted_lane_is_not_read_back(tmp_path: Path) -> None:
    store = Store(tmp_path / "lanes.db")
    store.update_lane("a", health="healthy")
    store.update_lane("b", health="healthy")
    assert [r.name for r in store.lanes()] == ["a", "b"]
    store.db.conn.execute("delete from lanes where name = 'a'")
    assert store.lane("a") is None
    assert [r.name for r in store.lanes()] == ["b"]
