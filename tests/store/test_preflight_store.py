"""The journal's kept preflight verdicts: written on first use, read back read-only, only verdicts kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.store import preflight as kept
from reconciler.store.journal import Store

pytestmark = pytest.mark.timeout(30)


def _record(store: Store, key: str, outcome: str) -> None:
    kept.record(store, key=key, engine="vllm", digest="sha256:" + "a" * 64, image="r/i@sha256:" + "a" * 64,
                argv='["/m"]', outcome=outcome, message="vllm: error: x", stderr="", host="dgx5", lane="l")  # fmt: skip


def test_a_verdict_is_kept_and_read_back_read_only(tmp_path: Path) -> None:
    db = tmp_path / "lanes.db"
    store = Store(db)
    assert kept.PREFLIGHTS not in store.db.table_names()  # opening made no table
    assert kept.cached(store, "k1") is None
    assert kept.read_cached(db, ["k1"]) == {}  # a journal without the table
    _record(store, "k1", "refused")
    seen = kept.cached(store, "k1")
    assert seen is not None and (seen.outcome, seen.host, seen.message) == ("refused", "dgx5", "vllm: error: x")
    store.close()
    db.chmod(0o444)
    try:
        assert set(kept.read_cached(db, ["k1", "k2"])) == {"k1"}
    finally:
        db.chmod(0o644)
    assert kept.read_cached(tmp_path / "absent.db", ["k1"]) == {}
    assert not (tmp_path / "absent.db").exists()  # reading never creates a journal


def test_only_verdicts_are_kept(tmp_path: Path) -> None:
    store = Store(tmp_path / "lanes.db")
    with pytest.raises(ValueError, match="only verdicts"):
        _record(store, "k", "unjudged")
    store.close()


def test_a_file_that_is_not_a_journal_reads_as_no_verdicts(tmp_path: Path) -> None:
    bad = tmp_path / "x.db"
    bad.write_bytes(b"not sqlite at all" * 10)
    assert kept.read_cached(bad, ["k"]) == {}
