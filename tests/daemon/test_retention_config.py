"""[retention]: documented in the example, defaults, refused values named by key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reconciler.daemon.config import SYSTEMD_ENV, RetentionSettings, load_config, parse_config
from reconciler.errors import InputError
from reconciler.store.retention import Retention

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
