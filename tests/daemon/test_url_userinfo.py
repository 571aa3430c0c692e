"""A `user:token@` in repo.url is never shown: not in /status, /healthz, the log or the mirror's config (issue 14).

The daemon runs as a process against a remote that does not answer, so its
fetches fail and every place that names the remote says so: /status
(`source.url`, `source.error`), /healthz, and the `repo.fetch_failed` lines.
The token must be in none of them, nor in the mirror's git config; the host
and path are (positive control: the URL is still shown, only without its
credentials). The token still goes to the remote, as an HTTP credential and
only over https (`Mirror`).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pygit2
import pytest

from reconciler.source.mirror import Mirror, public_url, split_userinfo
from tests.support.lanesproc import Child, end_process, spawn_daemon
from tests.support.net import free_port

pytestmark = [pytest.mark.timeout(90)]

TOKEN = "glpat-userinfoToken0123456789"


def test_userinfo_is_taken_out_of_http_urls_only() -> None:
    assert split_userinfo(f"https://lanes:{TOKEN}@forge.example.com/team/state.git") == (
        "https://forge.example.com/team/state.git",
        ("lanes", TOKEN),
    )
    assert split_userinfo(f"https://{TOKEN}@forge.example.com/x.git") == (
        "https://forge.example.com/x.git",
        ("x-access-token", TOKEN),
    )
    assert public_url("ssh://git@forge.example.com/team/state.git") == "ssh://git@forge.example.com/team/state.git"
    assert public_url("git@forge.example.com:team/state.git") == "git@forge.example.com:team/state.git"
    assert public_url("/srv/git/state.git") == "/srv/git/state.git"


def test_the_mirror_keeps_the_url_without_its_token_and_sends_it_over_https_only(tmp_path: Path) -> None:
    secure = Mirror(f"https://lanes:{TOKEN}@forge.example.com/team/state.git", tmp_path / "a")
    assert secure.url == "https://forge.example.com/team/state.git"
    assert secure.repo.remotes["origin"].url == secure.url
    assert TOKEN.encode() not in (tmp_path / "a" / "config").read_bytes()
    creds = secure._credentials()
    assert isinstance(creds, pygit2.UserPass) and creds.credential_tuple == ("lanes", TOKEN)
    plain = Mirror(f"http://lanes:{TOKEN}@forge.example.com/team/state.git", tmp_path / "b")
    assert plain._credentials() is None
    token_file = tmp_path / "repo-token"
    token_file.write_text("ghs_fromAFile0123456789\n")
    filed = Mirror("https://forge.example.com/team/state.git", tmp_path / "c", credential_file=token_file)
    creds = filed._credentials()
    assert isinstance(creds, pygit2.UserPass)
    assert creds.credential_tuple == ("x-access-token", "ghs_fromAFile0123456789")


async def test_status_healthz_and_log_never_show_the_token_of_the_repo_url(tmp_path: Path) -> None:
    dead = free_port()  # nothing listens: every fetch fails and says where it went
    url = f"https://lanes:{TOKEN}@127.0.0.1:{dead}/team/state.git"
    port = free_port()
    (tmp_path / "known_hosts").write_text("")
    config = tmp_path / "reconciler.toml"
    config.write_text(
        f'[repo]\nurl = "{url}"\nmirror_dir = "{tmp_path / "mirror"}"\nfetch_interval_s = 1\nwatch = false\n'
        f'[ssh]\nkey = "{tmp_path / "key"}"\nknown_hosts = "{tmp_path / "known_hosts"}"\n'
        f'[daemon]\ndb = "{tmp_path / "daemon.db"}"\nsecrets_dir = "{tmp_path / "secrets"}"\nlog_level = "debug"\n'
        f'[http]\nlisten = "127.0.0.1:{port}"\n'
    )
    log = tmp_path / "daemon.log"
    proc: Child | None = None
    try:
        proc = await spawn_daemon(config, log)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:

            async def failing() -> bool:
                try:
                    status = (await http.get("/status")).json()
                except (httpx.HTTPError, ValueError):
                    return False
                return bool(status["source"]["failures"] >= 2)

            for _ in range(600):
                if await failing():
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("fetches of the dead remote were not reported as failing")
            status = (await http.get("/status")).text
            healthz = (await http.get("/healthz")).text
        assert json.loads(status)["source"]["url"] == f"https://127.0.0.1:{dead}/team/state.git"
        assert f"127.0.0.1:{dead}" in healthz
        text = log.read_text()
        assert "repo.fetch_failed" in text
        for where, shown in (("/status", status), ("/healthz", healthz), ("log", text)):
            assert TOKEN not in shown, where
        assert TOKEN.encode() not in (tmp_path / "mirror" / "config").read_bytes()
    finally:
        await end_process(proc)


def test_config_check_shows_the_url_without_its_token(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from reconciler.cli.main import app

    config = tmp_path / "reconciler.toml"
    config.write_text(
        f'[repo]\nurl = "https://lanes:{TOKEN}@forge.example.com/team/state.git"\n'
        f'mirror_dir = "{tmp_path / "mirror"}"\n[ssh]\nkey = "{tmp_path / "key"}"\n'
        f'known_hosts = "{tmp_path / "kh"}"\n[daemon]\ndb = "{tmp_path / "db"}"\nsecrets_dir = "{tmp_path}/s"\n'
    )
    for extra in ([], ["--json"]):
        run = CliRunner().invoke(app, ["config", "check", "--config", str(config), *extra])
        assert run.exit_code == 0, run.output
        assert TOKEN not in run.output and "https://forge.example.com/team/state.git" in run.output


def test_repo_credential_file_is_a_daemon_credential_never_a_lane_secret(tmp_path: Path) -> None:
    from reconciler.daemon.config import parse_config
    from reconciler.errors import InputError

    base = '[repo]\nurl = "https://forge.example.com/team/state.git"\ncredential_file = "$CREDENTIALS_DIRECTORY/{}"\n'
    env = {"CREDENTIALS_DIRECTORY": str(tmp_path), "HOME": str(tmp_path)}
    cfg = parse_config(base.format("repo-token"), env=env)
    assert cfg.repo.credential_file == tmp_path / "repo-token"
    assert cfg.credential_files()["repo.credential_file"] == tmp_path / "repo-token"
    with pytest.raises(InputError, match=r"repo\.credential_file .* is in the lane secrets"):
        parse_config(base.format("lane_repo-token"), env=env)
