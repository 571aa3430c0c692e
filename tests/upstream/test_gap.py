"""The note's "Where we are" table, reproduced from recorded releases, by `gap_rows` and by `lanes upstream`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pygit2
import pytest

from reconciler.upstream.gap import GapRow, gap_rows
from reconciler.upstream.store import UpstreamStore
from tests.support.example import EUGR, GLM, MINIMAX, PRODUCTION, example_state, repo_files
from tests.support.upstreamcli import app, runner
from tests.support.upstreamgit import commit as git_commit
from tests.upstream.fixtures import feed_note_releases, local_upstreams, make_state_repo
from tests.upstream.servers import App, FakeGitHub, FakeRegistry, LocalServer

pytestmark = pytest.mark.timeout(60)


def rows_by_lane(rows: list[GapRow]) -> dict[str, GapRow]:
    return {r.lane: r for r in rows}


def test_the_notes_table_from_recorded_releases(store: UpstreamStore) -> None:
    feed_note_releases(store)
    rows = rows_by_lane(gap_rows(example_state(), store))

    prod = rows[PRODUCTION]  # ~3 weeks of DSpark/HiSparse work behind SGLang v0.5.22
    assert (prod.engine_version, prod.digest_short, prod.built) == ("0.0.0.dev1+gda64c5cbb", "f617afd8", "2026-09-29")
    assert (prod.upstream, prod.latest, prod.latest_date) == ("sglang-releases", "0.5.22", "2026-10-19")
    assert prod.rule == "build-date"  # 0.0.0.dev1 names no release: compared by build date
    assert prod.releases_behind == 1 and prod.between == ("0.5.22",)
    assert prod.days_behind == 20 and "~3 weeks" in prod.summary

    glm = rows[GLM]  # six minor releases behind vLLM 0.32.0
    assert (glm.latest, glm.latest_date, glm.rule) == ("0.32.0", "2026-10-18", "version")
    assert glm.releases_behind == 6 and glm.minors_behind == 6
    assert glm.between == ("0.27.0", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0")
    assert glm.days_behind == 36

    eugr = rows[EUGR]  # vLLM main 8244d1c44: essentially current
    assert eugr.upstream == "vllm-main" and eugr.rule == "commit"
    assert eugr.releases_behind == 0 and eugr.commits_behind == 2 and eugr.days_behind == 1
    assert eugr.summary.startswith("essentially current")
    assert eugr.latest == "main bbbbbbbbb" and eugr.latest_date == "2026-10-16"

    assert rows[MINIMAX].summary.startswith("nothing recorded yet")


def test_lanes_upstream_prints_the_table_and_its_json(tmp_path: Path) -> None:
    make_state_repo(tmp_path / "state-repo", repo_files())
    db = tmp_path / "lanes.db"
    with UpstreamStore(db) as store:
        feed_note_releases(store)
    result = runner.invoke(app, ["upstream", "--repo", str(tmp_path / "state-repo"), "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    lanes = {r["lane"]: r for r in out["lanes"]}
    assert lanes[PRODUCTION]["days_behind"] == 20 and lanes[GLM]["releases_behind"] == 6
    assert lanes[EUGR]["summary"].startswith("essentially current") and out["polled"] == []

    text = runner.invoke(
        app, ["upstream", "--repo", str(tmp_path / "state-repo"), "--db", str(db)], env={"COLUMNS": "250"}
    )
    assert text.exit_code == 0, text.output
    for expected in (
        "Where we are",
        "20 days (~3 weeks)",
        "6 releases behind (6 minor)",
        "essentially current",
        "0.27.0, 0.28.0, 0.29.0, 0.30.0, 0.31.0, 0.32.0",
        "@f617afd8",
        "sglang-releases: 0.5.22",
    ):
        assert expected in text.stdout, (expected, text.stdout)


def test_refresh_polls_every_source_with_a_progress_line_each(
    tmp_path: Path, serve: Callable[[App], LocalServer]
) -> None:
    gh = FakeGitHub(("sgl-project/sglang", "vllm-project/vllm"))
    gh.add("sgl-project/sglang", "v0.5.22", "2026-10-19T08:00:00Z")
    for minor in range(27, 33):
        gh.add("vllm-project/vllm", f"v0.{minor}.0", f"2026-{minor - 20:02d}-18T17:00:00Z")
    github = serve(gh)
    registry = serve(FakeRegistry({"eugr/spark-vllm-b12x": ["nightly-20261015"], "lmsysorg/sglang": ["v0.5.22-cu130"]}))
    bare = {}
    for name in ("vllm-main", "flare-main"):
        repo = pygit2.init_repository(str(tmp_path / f"{name}.git"), bare=True, initial_head="main")
        git_commit(repo, f"{name} work", int(time.mktime((2026, 10, 16, 12, 0, 0, 0, 0, 0))))
        bare[name] = repo.path
    files = repo_files()
    files["state/upstreams.yaml"] = local_upstreams(github.url, registry.host, bare["vllm-main"], bare["flare-main"])
    make_state_repo(tmp_path / "state-repo", files)
    args = [
        "upstream",
        "--repo",
        str(tmp_path / "state-repo"),
        "--db",
        str(tmp_path / "lanes.db"),
        "--data-dir",
        str(tmp_path / "mirrors"),
        "--refresh",
        "--json",
    ]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert {p["source"]: p["status"] for p in out["polled"]} == {
        "sglang-releases": "new",
        "vllm-releases": "new",
        "vllm-main": "new",
        "flare-main": "new",
        "eugr-b12x": "new",
        "sglang-images": "new",
    }
    for name in ("sglang-releases", "vllm-releases", "vllm-main", "flare-main", "eugr-b12x", "sglang-images"):
        assert f"{name} (" in result.stderr
    lanes = {r["lane"]: r for r in out["lanes"]}
    assert lanes[GLM]["releases_behind"] == 6 and lanes[PRODUCTION]["days_behind"] == 20
    assert lanes[EUGR]["summary"].startswith("essentially current")  # the local head names no 8244d1c44: by date

    again = runner.invoke(app, args, env={"COLUMNS": "200"})
    polled = {p["source"]: p["status"] for p in json.loads(again.stdout)["polled"]}
    assert set(polled.values()) == {"unchanged"}
