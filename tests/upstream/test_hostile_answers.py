"""Hostile upstream answers and tag filters through `lanes upstream --refresh` (issue 24, holes 4 and 5).

One source answering 100 MB, one answering truncated JSON and one answering well: the first two are
recorded as failed with the reason, the third is polled as usual (before issue 24 the truncated answer
raised out of the poll's `gather` and the command crashed with no source recorded). A tag filter that
backtracks exponentially under Python's `re` runs in linear time under RE2; one RE2 cannot run in linear
time is refused when the file is loaded, with file, line and field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler.cli.main import app as lanes_app
from tests.support.example import repo_files
from tests.upstream.fixtures import make_state_repo
from tests.upstream.servers import App, FakeGitHub, LocalServer, Reply, Request
from tests.upstream.test_cli_tokens import app

pytestmark = pytest.mark.timeout(60)

HUGE = 100 << 20


def _stubs(tmp_path: Path, names: tuple[str, ...]) -> str:
    return "".join(f'  - {{kind: git-head, name: {n}, url: "{tmp_path / "missing.git"}"}}\n' for n in names)


def _refresh(tmp_path: Path, upstreams: str) -> tuple[int, dict[str, dict[str, object]], str]:
    files = repo_files()
    files["state/upstreams.yaml"] = upstreams.encode()
    make_state_repo(tmp_path / "state-repo", files)
    argv = ["upstream", "--repo", str(tmp_path / "state-repo"), "--data-dir", str(tmp_path / "mirrors")]
    run = CliRunner().invoke(app(), [*argv, "--db", str(tmp_path / "u.db"), "--refresh", "--json"])
    assert run.exception is None or isinstance(run.exception, SystemExit), repr(run.exception)
    assert "polled" in json.loads(run.stdout), run.output
    polled = {p["source"]: p for p in json.loads(run.stdout)["polled"]}
    return run.exit_code, polled, run.output


def test_a_huge_and_a_truncated_answer_fail_their_own_source_only(
    tmp_path: Path, serve: Callable[[App], LocalServer]
) -> None:
    gh = FakeGitHub(("good/repo",))
    gh.add("good/repo", "v1.0.0", "2026-10-19T08:00:00Z")

    def answer(req: Request) -> Reply:
        if req.path.startswith("/repos/huge/"):
            return Reply(200, {"Content-Type": "application/json"}, b"[" + b" " * HUGE + b"]")
        if req.path.startswith("/repos/cut/"):
            return Reply(200, {"Content-Type": "application/json"}, b'[{"tag_name": "v2.0.0", "draft": fal')
        return gh(req)

    server = serve(answer)
    sources = "".join(
        f'  - {{kind: github-releases, name: {name}, repo: {repo}, api_url: "{server.url}"}}\n'
        for name, repo in (("huge", "huge/repo"), ("cut", "cut/repo"), ("sglang-releases", "good/repo"))
    )
    _, polled, output = _refresh(
        tmp_path, "sources:\n" + sources + _stubs(tmp_path, ("vllm-releases", "vllm-main", "flare-main"))
    )
    assert polled["sglang-releases"]["status"] == "new" and polled["sglang-releases"]["new"] == ["v1.0.0"], output
    assert polled["huge"]["status"] == "failed" and "exceeds" in str(polled["huge"]["error"]), output
    assert polled["cut"]["status"] == "failed" and "not valid JSON" in str(polled["cut"]["error"]), output


def test_an_exponential_tag_filter_runs_in_linear_time(tmp_path: Path, serve: Callable[[App], LocalServer]) -> None:
    # Under Python's `re`, `^(a+)+$` against 40 a's and a '!' backtracks 2^40 times: this test timed out.
    gh = FakeGitHub(("slow/repo",))
    gh.add("slow/repo", "a" * 40 + "!", "2026-10-18T08:00:00Z")
    gh.add("slow/repo", "a" * 40, "2026-10-19T08:00:00Z")
    server = serve(gh)
    _, polled, output = _refresh(
        tmp_path,
        "sources:\n"
        f'  - {{kind: github-releases, name: slow, repo: slow/repo, api_url: "{server.url}", '
        "tag_filter: '^(a+)+$'}\n" + _stubs(tmp_path, ("sglang-releases", "vllm-releases", "vllm-main", "flare-main")),
    )
    assert polled["slow"]["status"] == "new" and polled["slow"]["new"] == ["a" * 40], output


def test_lanes_check_refuses_a_tag_filter_re2_cannot_run_naming_file_line_and_field(tmp_path: Path) -> None:
    files = repo_files()
    text = files["state/upstreams.yaml"].decode()
    assert "tag_filter: ^nightly-" in text
    files["state/upstreams.yaml"] = text.replace("tag_filter: ^nightly-", "tag_filter: '^(nightly)-\\1'").encode()
    line = next(i for i, t in enumerate(files["state/upstreams.yaml"].decode().splitlines(), 1) if "tag_filter" in t)
    make_state_repo(tmp_path / "repo", files)
    run = CliRunner().invoke(lanes_app, ["check", "--repo", str(tmp_path / "repo")])
    assert run.exit_code == 2, run.output
    assert f"state/upstreams.yaml:{line}" in run.output and "tag_filter" in run.output, run.output
    assert "linear time" in run.output and "backreferences" in run.output, run.output
