"""`lanes bench` through typer on a real git repo, against real stand-in processes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pygit2
import pytest
import typer
from typer.testing import CliRunner

from reconciler.cli.bench import bench_cmd
from reconciler.daemon.trialjob import comparison_markdown
from tests.bench.conftest import StartStandin, free_port
from tests.support.example import PRODUCTION
from tests.support.gitrepo import make_repo

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

SERVED = "deepseek-v4.1-flash"  # the production lane's served_model_name
PACING = {"STANDIN_PP_TPS": "2000", "STANDIN_TG_TPS": "200"}

app = typer.Typer()
app.command("bench")(bench_cmd)
app.command("noop")(lambda: None)  # two commands, so `bench` is a subcommand as in `lanes`
runner = CliRunner()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("state-repo")
    make_repo(path)
    return path


def bench(repo: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["bench", PRODUCTION, "--repo", str(repo), *args], env={"COLUMNS": "200"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def test_bench_writes_evidence_and_chart_then_flags_a_slower_engine(
    repo: Path, tmp_path: Path, start_standin: StartStandin
) -> None:
    url = start_standin(SERVED, **PACING)
    out = tmp_path / "evidence" / "first.json"
    code, stdout, stderr = bench(repo, "--url", url, "--profile", "quick", "--out", str(out))
    assert code == 0, stdout + stderr
    assert "pp512" in stdout and "tg32" in stdout and str(out) in stdout
    first = json.loads(out.read_text())
    head = str(pygit2.Repository(str(repo)).head.target)
    assert first["lane"] == PRODUCTION and first["commit"] == head
    assert first["hosts"] == ["dgx1", "dgx2", "dgx3", "dgx4"] and first["engine"] == "sglang"
    assert first["image_digest"].startswith("sha256:f617afd8")
    assert first["profile"]["name"] == "quick" and first["url"] == url
    assert ET.parse(out.with_suffix(".svg")).getroot().tag.endswith("svg")

    slow = start_standin(SERVED, **PACING, STANDIN_SLOWDOWN="1.25")
    code, stdout, stderr = bench(repo, "--url", slow, "--profile", "quick", "--baseline", str(out), "--json")
    assert code == 1, stdout + stderr
    second = json.loads(stdout)  # stdout holds only the JSON; the progress bar went to stderr
    assert second["regression"] is True and second["comparison"]["baseline"]["commit"] == head
    assert any(r.startswith("tg_throughput") for r in second["comparison"]["regressions"])
    # What a proposal's pull request says about such a candidate.
    body = comparison_markdown(second, PRODUCTION)
    assert "**Regression:**" in body and "tg_throughput" in body and "**worse**" in body


def test_bad_input_exits_2_and_an_unusable_endpoint_exits_5(repo: Path, tmp_path: Path) -> None:
    code, _, err = bench(repo, "--profile", "nope")
    assert code == 2 and "no bench profile 'nope'" in err
    result = runner.invoke(app, ["bench", "no-such-lane", "--repo", str(repo), "--url", "http://127.0.0.1:9"])
    assert result.exit_code == 2 and "no lane 'no-such-lane'" in result.stderr
    code, _, err = bench(repo, "--baseline", str(tmp_path / "missing.json"))
    assert code == 2 and "cannot read baseline" in err
    code, _, err = bench(repo, "--url", f"http://127.0.0.1:{free_port()}", "--profile", "quick")
    assert code == 5 and "ConnectError" in err and "endpoint unusable" in err
