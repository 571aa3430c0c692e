"""The exit-code table, command by command, and the one JSON error shape on stdout.

Each case runs the real command and checks its code against the number written here by hand (the
table in `lanes --help`): a script that branches on `$?` relies on exactly these. `plan`, `apply`,
`hosts` and `bench` against live endpoints are in their own test files (simulated Sparks, a
stand-in engine); this file covers the rest and the table itself.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler.cli.main import app
from reconciler.store.journal import Store
from tests.support.example import EUGR, GLM, PRODUCTION, ROOT, repo_files
from tests.support.gitrepo import make_repo
from tests.upstream.fixtures import local_upstreams

pytestmark = pytest.mark.timeout(120)
runner = CliRunner()
EXAMPLE_CONFIG = ROOT / "systemd" / "reconciler.toml.example"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_help_lists_every_exit_code_once() -> None:
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0
    table = result.output[result.output.index("Exit codes") :]
    for code, name in (
        (0, "ok"),
        (1, "failed"),
        (2, "bad input"),
        (3, "changes"),
        (4, "blocked"),
        (5, "unavailable"),
        (6, "not confirmed"),
        (7, "timed out"),
        (130, "interrupted"),
    ):
        assert f" {code} " in table and name in table, (code, name)
    assert '"error"' in table and "stdout" in table


def test_a_usage_error_is_2_before_any_command_runs() -> None:
    assert runner.invoke(app, ["plan", "--no-such-flag"]).exit_code == 2
    assert runner.invoke(app, ["retry"]).exit_code == 2


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["plan", "--json", "--no-such-flag"], "No such option: --no-such-flag"),
        (["plan", "--json", "--lane"], "Option '--lane' requires an argument."),
        (["--log-level", "info", "nosuch", "--json"], "No such command 'nosuch'."),
    ],
)
def test_a_usage_error_with_json_is_the_json_error_shape_too(argv: list[str], error: str) -> None:
    result = runner.invoke(app, argv)
    assert result.exit_code == 2
    assert json.loads(result.stdout) | {"usage": None} == {"ok": False, "error": error, "exit_code": 2, "usage": None}
    assert result.stderr == ""


def _lanes(*argv: str) -> subprocess.CompletedProcess[str]:
    """The installed `lanes` script as a process (it reads sys.argv; CliRunner passes args instead)."""
    lanes = Path(sys.executable).parent / "lanes"
    return subprocess.run([str(lanes), *argv], check=False, capture_output=True, text=True, timeout=60)


def test_a_usage_error_with_json_from_the_lanes_script_itself() -> None:
    proc = _lanes("check", "--json", "--bogus")
    assert proc.returncode == 2, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["ok"], out["error"], out["usage"]) == (False, "No such option: --bogus", "Usage: lanes check [OPTIONS]")
    plain = _lanes("check", "--bogus")  # without --json: click's text on stderr, as before
    assert plain.returncode == 2 and plain.stdout == "" and "No such option: --bogus" in plain.stderr


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.startswith("lanes ")


def test_config_check_lists_every_problem_and_suggests_systemd() -> None:
    clean = {"STATE_DIRECTORY": "", "CREDENTIALS_DIRECTORY": "", "CONFIGURATION_DIRECTORY": ""}
    result = runner.invoke(app, ["config", "check", "--config", str(EXAMPLE_CONFIG)], env=clean)
    assert result.exit_code == 2, result.output
    err = result.stderr
    # The example file names the three systemd directories in five keys: every one is listed, with its line.
    for field in ("repo.mirror_dir", "ssh.key", "ssh.known_hosts", "daemon.db", "daemon.secrets_dir"):
        assert f": {field}: $" in err, (field, err)
    assert "5 problems" in err and "more problem" not in err
    assert "--systemd" in err.split("hint:")[1]

    result = runner.invoke(app, ["config", "check", "--config", str(EXAMPLE_CONFIG), "--json"], env=clean)
    assert result.exit_code == 2
    out = json.loads(result.stdout)  # the error is the JSON on stdout, nothing else is printed
    assert out["ok"] is False and out["exit_code"] == 2 and not result.stderr
    assert [p["field"] for p in out["problems"]] == [
        "repo.mirror_dir",
        "ssh.key",
        "ssh.known_hosts",
        "daemon.db",
        "daemon.secrets_dir",
    ]
    assert all(isinstance(p["line"], int) for p in out["problems"]) and "--systemd" in out["hint"]

    # As the unit reads it, the example file parses, and still cannot run: its repo.url is a placeholder and
    # the key it loads is not installed. Every section is printed all the same, then why it fails.
    unit = runner.invoke(app, ["config", "check", "--config", str(EXAMPLE_CONFIG), "--systemd"], env=clean)
    assert unit.exit_code == 2, unit.output
    assert "repo.url: git@forge.example.com:team/lanes-state.git is the example file's placeholder" in unit.stderr
    assert "ssh.key: /run/credentials/lanes-reconciler.service/ssh-key comes from LoadCredential=" in unit.stderr
    for section in ("repo", "ssh", "daemon", "http", "upstream", "bench", "retention", "notifications", "forge"):
        assert f"\n[{section}]\n" in unit.stdout, section
    assert "\n[experiments]\n" in unit.stdout


def test_config_check_without_systemd_variables_gives_no_systemd_hint(tmp_path: Path) -> None:
    path = tmp_path / "reconciler.toml"
    path.write_text('[repo]\nurl = "/x"\nbogus = 1\n[http]\nlisten = "everywhere"\n')
    result = runner.invoke(app, ["config", "check", "--config", str(path)])
    assert result.exit_code == 2
    assert "2 problems" in result.stderr and "repo.bogus" in result.stderr and "http.listen" in result.stderr
    assert "hint" not in result.stderr


def test_check_deny_is_1_and_bad_input_is_2_with_the_json_error_on_stdout(tmp_path: Path) -> None:
    files = repo_files()
    lane = next(p for p in files if p.startswith("state/lanes/"))
    files[lane] = b"engine: [\n"
    make_repo(tmp_path / "bad", files)
    result = runner.invoke(app, ["check", "--repo", str(tmp_path / "bad"), "--json"])
    assert result.exit_code == 2 and not result.stderr
    out = json.loads(result.stdout)
    assert (out["ok"], out["exit_code"], out["file"]) == (False, 2, lane) and out["error"]


def test_retry_of_an_unknown_lane_is_2_naming_the_known_lanes(tmp_path: Path) -> None:
    db = tmp_path / "lanes.db"
    store = Store(db)
    store.update_lane(PRODUCTION, desired="running", health="healthy", failed_fingerprint="f" * 16)
    store.update_lane(EUGR, desired="running", health="healthy")
    store.close()
    result = runner.invoke(app, ["retry", "no-such-lane", "--db", str(db)])
    assert result.exit_code == 2
    assert "no-such-lane" in result.stderr and PRODUCTION in result.stderr and EUGR in result.stderr
    result = runner.invoke(app, ["retry", "no-such-lane", "--db", str(db), "--json"])
    assert result.exit_code == 2 and json.loads(result.stdout)["exit_code"] == 2
    result = runner.invoke(app, ["retry", PRODUCTION, "--db", str(db)])
    assert result.exit_code == 0 and "failed mark cleared" in result.stdout
    result = runner.invoke(app, ["retry", PRODUCTION, "--db", str(tmp_path / "none.db")])
    assert result.exit_code == 2 and "no journal" in result.stderr
    assert not (tmp_path / "none.db").exists()


def test_history_of_an_unknown_lane_is_2_naming_the_known_lanes(tmp_path: Path) -> None:
    make_repo(tmp_path / "repo", repo_files())
    result = runner.invoke(app, ["history", "no-such-lane", "--repo", str(tmp_path / "repo")])
    assert result.exit_code == 2
    assert "no lane 'no-such-lane'" in result.stderr and GLM in result.stderr and PRODUCTION in result.stderr
    result = runner.invoke(app, ["history", "no-such-lane", "--repo", str(tmp_path / "repo"), "--json"])
    assert result.exit_code == 2 and json.loads(result.stdout)["ok"] is False
    assert runner.invoke(app, ["history", GLM, "--repo", str(tmp_path / "repo")]).exit_code == 0


def test_upstream_refresh_with_every_source_failing_is_5(tmp_path: Path) -> None:
    closed = _closed_port()
    files = repo_files()
    files["state/upstreams.yaml"] = local_upstreams(
        f"http://127.0.0.1:{closed}", f"127.0.0.1:{closed}", str(tmp_path / "none1.git"), str(tmp_path / "none2.git")
    )
    make_repo(tmp_path / "repo", files)
    args = ["upstream", "--repo", str(tmp_path / "repo"), "--db", str(tmp_path / "lanes.db")]
    args += ["--data-dir", str(tmp_path / "mirrors"), "--refresh"]
    t0 = time.monotonic()
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 5, result.output
    out = json.loads(result.stdout)
    assert {p["status"] for p in out["polled"]} == {"failed"} and len(out["polled"]) == 6
    assert out["ok"] is False and out["exit_code"] == 5 and "every upstream source failed" in out["error"]
    print(f"\nsix failing sources polled in {time.monotonic() - t0:.1f} s")
    # Without --refresh nothing is polled: the table of what was recorded, exit 0.
    result = runner.invoke(app, args[:-1])
    assert result.exit_code == 0, result.output


def test_without_a_daemon_or_a_journal_each_command_says_how_to_point_at_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No LANES_DAEMON, no config file, no ./.lanes/lanes.db: the answer is where to point, not "no journal"."""
    monkeypatch.chdir(tmp_path)
    env = {"LANES_DAEMON": "", "LANES_CONFIG": "", "LANES_DB": ""}
    for argv in (["status"], ["retry", PRODUCTION], ["suspend", PRODUCTION, "--reason", "r"], ["wait", EUGR]):
        result = runner.invoke(app, [*argv, "--json"], env=env)
        assert result.exit_code == 2, (argv, result.output)
        out = json.loads(result.stdout)
        assert out["ok"] is False and out["exit_code"] == 2
        assert "--daemon URL" in out["error"] and "--config FILE" in out["error"] and "--db FILE" in out["error"]
    assert not (tmp_path / ".lanes").exists()  # nothing was created by asking


def test_json_results_carry_ok_and_exit_code(tmp_path: Path) -> None:
    db = tmp_path / "lanes.db"
    sha = "0123456789abcdef0123456789abcdef01234567"
    result = runner.invoke(app, ["allow-rewind", sha, "--reason", "a planned force-push", "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    assert {"ok": True, "exit_code": 0}.items() <= json.loads(result.stdout).items()
    repo = tmp_path / "repo"
    make_repo(repo)
    result = runner.invoke(app, ["history", "--repo", str(repo), "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["ok"] is True and out["exit_code"] == 0 and out["suspensions"] == []
