"""Redaction everywhere (issue 14): secrets of any length, the list reloaded on SIGHUP, what commands print.

Short values: any non-empty secret is redacted. One of 6 characters or more
is replaced wherever it occurs; a shorter one only where it stands as a
whole word (`HF_TOKEN=ab1`, `"ab1"`), so a 3-character value does not blank
every longer word that holds those letters.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from reconciler.daemon.config import load_config
from reconciler.daemon.service import Daemon
from reconciler.execute.secrets import SecretStore, secret_values
from reconciler.logsetup import RedactingStream, configure, forget_secrets, redact, remember_secrets
from tests.support.gitrepo import StateRepo

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    forget_secrets()
    yield
    forget_secrets()
    configure("warning")


def test_secrets_shorter_than_six_characters_are_redacted_as_whole_words() -> None:
    out = io.StringIO()
    configure("info", json_lines=True, secrets=["ab1", "q"], stream=out)
    structlog.get_logger("t").info("step.failed", env="HF_TOKEN=ab1", quoted='token "ab1" refused', word="quiet q")
    line = json.loads(out.getvalue())
    assert line["env"] == "HF_TOKEN=[redacted]" and line["quoted"] == 'token "[redacted]" refused'
    assert line["word"] == "quiet [redacted]"  # the 1-character value alone, not inside "quiet"
    assert redact("xab1y cab1") == "xab1y cab1"  # inside longer words: left alone
    assert redact("a-b ab1.") == "a-b [redacted]."


def test_a_secret_read_at_apply_time_is_redacted_at_once(tmp_path: Path) -> None:
    (tmp_path / "hf-token").write_text("hf_added_after_start_0123\n")
    assert redact("HF_TOKEN=hf_added_after_start_0123") == "HF_TOKEN=hf_added_after_start_0123"
    SecretStore(tmp_path).get("hf-token")
    assert redact("HF_TOKEN=hf_added_after_start_0123") == "HF_TOKEN=[redacted]"


def test_what_a_command_prints_is_redacted() -> None:
    inner = io.StringIO()
    stream = RedactingStream(inner)
    configure("warning", secrets=["hf_printed_secret_0123"])
    print('{"logs": {"rank0@dgx5": "HF_TOKEN=hf_printed_secret_0123"}}', file=stream)
    assert inner.getvalue() == '{"logs": {"rank0@dgx5": "HF_TOKEN=[redacted]"}}\n'


def test_sighup_reloads_the_secret_values(tmp_path: Path) -> None:
    """A secret file added (or rotated) while the daemon runs is redacted after a reload, whatever reads it."""
    repo = StateRepo(tmp_path / "state-repo")
    lane_secrets = tmp_path / "lane-secrets"
    lane_secrets.mkdir()
    (lane_secrets / "hf-token").write_text("hf_at_start_0123456789\n")
    (tmp_path / "kh").write_text("")
    config_path = tmp_path / "reconciler.toml"
    config_path.write_text(
        f'[repo]\nurl = "{repo.path}"\nmirror_dir = "{tmp_path / "mirror"}"\n'
        f'[ssh]\nkey = "{tmp_path / "key"}"\nknown_hosts = "{tmp_path / "kh"}"\n'
        f'[daemon]\ndb = "{tmp_path / "lanes.db"}"\nsecrets_dir = "{lane_secrets}"\n'
        f'[http]\nenabled = false\nwebhook_secret_file = "{tmp_path / "webhook-secret"}"\n'
    )
    (tmp_path / "webhook-secret").write_text("whsec_at_start_0123456789\n")
    config = load_config(config_path)
    configure("warning", secrets=secret_values(config))
    daemon = Daemon(config, config_path, install_signals=False)
    try:
        assert redact("hf_at_start_0123456789 whsec_at_start_0123456789") == "[redacted] [redacted]"
        (lane_secrets / "hf-token").write_text("hf_rotated_0123456789\n")
        (tmp_path / "webhook-secret").write_text("whsec_rotated_0123456789\n")
        assert "hf_rotated_0123456789" in redact("hf_rotated_0123456789")
        daemon._reload()
        assert redact("hf_rotated_0123456789 whsec_rotated_0123456789") == "[redacted] [redacted]"
    finally:
        daemon.store.close()


def test_errors_and_log_tails_are_redacted_before_the_journal_stores_them(tmp_path: Path) -> None:
    """Remote output in an error (a refused `docker run` quoting its env) never reaches sqlite as is."""
    from reconciler.store.journal import Store

    secret = "hf_in_an_error_0123456789"
    remember_secrets([secret])
    store = Store(tmp_path / "lanes.db")
    try:
        step = store.step_started("run1", "lane-a", "c" * 40, 1, "start", {})
        store.step_finished(step, error=f"docker run refused: HF_TOKEN={secret}")
        store.record_apply(
            "run1", "lane-a", "c" * 40, None, "failed", f"rank said {secret}", 0.0, {}, {"r0@dgx1": f"tok={secret}"}
        )
        store.update_lane("lane-a", last_error=f"failed: {secret}")
        assert secret not in json.dumps([store.journal("lane-a"), store.lane("lane-a").__dict__], default=str)
    finally:
        store.close()
    for path in tmp_path.iterdir():
        assert secret.encode() not in path.read_bytes(), path
