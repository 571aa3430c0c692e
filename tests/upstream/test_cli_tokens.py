"""`lanes upstream --refresh` sends a token only as the daemon's settings declare it (issue 14).

The command reads `state/upstreams.yaml` from a commit anyone with push
access wrote. With `--secrets-dir` alone, a source's `token_credential` no
longer picks a file to send: nothing is sent. With `--config` (the daemon's
reconciler.toml) the declared token goes to its hosts, over https or to an
allowed loopback test server.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from reconciler.cli.upstream import upstream_cmd
from reconciler.logsetup import configure
from tests.support.example import repo_files
from tests.upstream.fixtures import make_state_repo
from tests.upstream.servers import App, FakeGitHub, LocalServer

TOKEN = "ghp_cliToken0123456789abcdef"


pytestmark = pytest.mark.timeout(60)


def app() -> typer.Typer:
    cli = typer.Typer()

    @cli.callback()
    def main() -> None:
        """As reconciler.cli.main does: logs to stderr, so --json owns stdout."""
        configure("warning")

    cli.command("upstream")(upstream_cmd)
    return cli


def test_refresh_sends_a_token_only_when_the_daemons_settings_declare_it(
    tmp_path: Path, serve: Callable[[App], LocalServer]
) -> None:
    gh = FakeGitHub(("sgl-project/sglang",))
    gh.add("sgl-project/sglang", "v0.5.22", "2026-10-19T08:00:00Z")
    github = serve(gh)
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "github-token").write_text(TOKEN + "\n")
    files = repo_files()
    stubs = "".join(
        f'  - {{kind: git-head, name: {n}, url: "{tmp_path / "missing.git"}"}}\n'
        for n in ("vllm-releases", "vllm-main", "flare-main")
    )
    files["state/upstreams.yaml"] = (
        "sources:\n"
        f'  - {{kind: github-releases, name: sglang-releases, repo: sgl-project/sglang, api_url: "{github.url}", '
        f"token_credential: github-token}}\n{stubs}"
    ).encode()
    make_state_repo(tmp_path / "state-repo", files)
    base = [
        "upstream",
        "--repo",
        str(tmp_path / "state-repo"),
        "--data-dir",
        str(tmp_path / "mirrors"),
        "--refresh",
        "--json",
    ]

    run = CliRunner().invoke(app(), [*base, "--db", str(tmp_path / "a.db"), "--secrets-dir", str(creds)])
    # Every source failed here (the token undeclared, the git heads missing): exit 5 (issue 16).
    assert run.exit_code == 5, run.output
    assert all("authorization" not in r.headers for r in github.requests)
    polled = {p["source"]: p for p in json.loads(run.stdout)["polled"]}
    assert "not declared" in str(polled["sglang-releases"]["error"])

    config = tmp_path / "reconciler.toml"
    config.write_text(
        f'[repo]\nurl = "{tmp_path}/state-repo"\n[daemon]\nsecrets_dir = "{tmp_path}/lane-secrets"\n'
        '[upstream]\nallow_insecure_hosts = ["127.0.0.1"]\n'
        f'[upstream.credentials.github-token]\nfile = "{creds / "github-token"}"\nhosts = ["127.0.0.1"]\n'
    )
    run = CliRunner().invoke(app(), [*base, "--db", str(tmp_path / "b.db"), "--config", str(config)])
    assert run.exit_code == 0, run.output
    assert any(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in github.requests)
    assert TOKEN not in run.output
