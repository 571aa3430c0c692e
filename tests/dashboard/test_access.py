"""Who may read the dashboard: loopback without a token, a bearer of the token anywhere once one is set."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.daemon.config import parse_config
from reconciler.dashboard.access import refusal

pytestmark = pytest.mark.timeout(10)
TOKEN = "tok-3f9c2a71"


def token_file(tmp_path: Path, text: str = TOKEN + "\n") -> Path:
    path = tmp_path / "dashboard-token"
    path.write_text(text)
    return path


def test_loopback_without_a_token_is_open() -> None:
    assert refusal({}, loopback=True, token_file=None) is None


def test_off_loopback_without_a_token_file_the_pages_are_refused() -> None:
    denied = refusal({"authorization": f"Bearer {TOKEN}"}, loopback=False, token_file=None)
    assert denied is not None and denied.status == 403 and "dashboard_token_file" in denied.text


@pytest.mark.parametrize("loopback", [True, False])
def test_with_a_token_file_only_its_bearer_gets_in(tmp_path: Path, loopback: bool) -> None:
    path = token_file(tmp_path)
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": f"Basic {TOKEN}"}, {"authorization": ""}):
        denied = refusal(headers, loopback=loopback, token_file=path)
        assert denied is not None and denied.status == 401, headers
        assert denied.headers["WWW-Authenticate"].startswith("Bearer ")
    # RFC 6750 2.1: the scheme is case-insensitive; the file's trailing newline is not part of the token.
    assert refusal({"authorization": f"Bearer {TOKEN}"}, loopback=loopback, token_file=path) is None
    assert refusal({"authorization": f"bearer {TOKEN}"}, loopback=loopback, token_file=path) is None


def test_an_empty_or_missing_token_file_lets_nobody_in(tmp_path: Path) -> None:
    empty = token_file(tmp_path, "\n")
    denied = refusal({"authorization": "Bearer "}, loopback=False, token_file=empty)
    assert denied is not None and denied.status == 503
    denied = refusal({"authorization": f"Bearer {TOKEN}"}, loopback=True, token_file=tmp_path / "absent")
    assert denied is not None and denied.status == 503


def test_the_token_file_is_a_setting_and_a_credential_the_redactor_learns(tmp_path: Path) -> None:
    text = f'[repo]\nurl = "/r"\n[http]\nlisten = "0.0.0.0:9464"\ndashboard_token_file = "{tmp_path}/t"\n'
    cfg = parse_config(text, env={"HOME": "/home/op"})
    assert cfg.http.dashboard_token_file == tmp_path / "t" and cfg.http.dashboard
    assert cfg.credential_files()["http.dashboard_token_file"] == tmp_path / "t"
    off = parse_config('[repo]\nurl = "/r"\n[http]\ndashboard = false\n', env={"HOME": "/home/op"})
    assert off.http.dashboard is False and off.http.dashboard_token_file is None
