"""[retention]: documented in the example, defaults, refused values named by key."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from reconciler.daemon.config import SYSTEMD_ENV, RetentionSettings, load_config, parse_config
from reconciler.daemon.retentionjob import prune_journal
from reconciler.errors import InputError
from reconciler.store.journal import Store
from reconciler.store.retention import DAY_S, Retention

pytestmark = pytest.mark.timeout(30)

EXAMPLE = Path(__file__).resolve().parents[2] / "systemd" / "reconciler.toml.example"
REPO = '[repo]\nurl = "git@forge.example.com:team/lanes-state.git"\n'


def test_every_retention_key_is_described_and_in_the_example() -> None:
    text = EXAMPLE.read_text()
    assert re.search(r"^\[retention\]", text, re.M)
    for name, field in RetentionSettings.model_fields.items():
        assert field.description and len(field.description) > 15, name
        assert re.search(rf"^{name} = ", text, re.M), name
    assert load_config(EXAMPLE, env=SYSTEMD_ENV).retention == RetentionSettings()


def test_defaults_and_a_section() -> None:
    cfg = parse_config(REPO, env=SYSTEMD_ENV)
    assert cfg.retention.policy() == Retention(journal_days=30, applies_days=180, commits_days=180)
    assert cfg.retention.prune_interval_s == 86400
    cfg = parse_config(REPO + "[retention]\njournal_days = 7\ncommits_days = 0\n", env=SYSTEMD_ENV)
    assert cfg.retention.policy() == Retention(journal_days=7, applies_days=180, commits_days=0)


@pytest.mark.parametrize(
    ("line", "key"),
    [("journal_days = -1", "journal_days"), ("prune_interval_s = 1", "prune_interval_s"), ("keep = 3", "keep")],
)
def test_bad_values_are_named(line: str, key: str) -> None:
    with pytest.raises(InputError) as info:
        parse_config(REPO + f"[retention]\n{line}\n", file="r.toml", env=SYSTEMD_ENV)
    assert key in str(info.value)


def test_the_daemon_job_prunes_old_rows_and_keeps_the_last_healthy(tmp_path: Path) -> None:
    store = Store(tmp_path / "lanes.db", hold_writes=True)
    old = time.time() - 400 * DAY_S
    for i, result in enumerate(["applied", "rolled-back", "rolled-back"]):
        row = {"run": f"r{i}", "lane": "a", "commit": f"c{i}", "result": result, "started": old, "finished": old}
        store.db.table("applies").insert(row, alter=True)
        step = {"run": f"r{i}", "lane": "a", "state": "done", "started": old, "finished": old}
        store.db.table("journal").insert(step)
    pruned = prune_journal(store, RetentionSettings())
    assert pruned is not None and (pruned.applies, pruned.journal) == (1, 1)
    assert sorted(r["commit"] for r in store.applies()) == ["c0", "c2"]


def test_the_daemon_job_survives_a_refusing_database(tmp_path: Path) -> None:
    store = Store(tmp_path / "lanes.db", hold_writes=True)
    store.db.conn.execute("BEGIN")  # a transaction already open: BEGIN IMMEDIATE fails
    assert prune_journal(store, RetentionSettings()) is None
