"""`lane_history` and `lanes history` on a real repository built from the example fleet."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pygit2
import pytest
import typer
from typer.testing import CliRunner

from reconciler.cli.history import history_cmd
from reconciler.source.history import diff_fields, history, lane_history
from reconciler.source.notes import write_verdict_note
from reconciler.store.journal import Store
from tests.source.gitutil import commit, sig
from tests.support.example import EUGR, GLM, MINIMAX, PRODUCTION, repo_files

pytestmark = pytest.mark.timeout(60)

MODEL = "state/models/deepseek-v4.1-flash-1017.yaml"
NEW_DIGEST = "sha256:" + "1" * 64


def lane(name: str) -> str:
    return f"state/lanes/{name}.yaml"


def weight_line() -> bytes:
    """The example model's weight_bytes line as state/ has it: the figure follows the model's sources."""
    return next(line for line in repo_files()[MODEL].splitlines() if line.startswith(b"weight_bytes:"))


def old_weight() -> int:
    return int(weight_line().split(b":", 1)[1].split(b"#", 1)[0])


@dataclass
class Fleet:
    repo: pygit2.Repository
    path: Path
    initial: str
    bump: str
    evidence: str
    glm_move: str
    merge: str
    model: str
    remove: str
    broken: str


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    path = tmp_path / "fleet"
    repo = pygit2.init_repository(str(path), bare=False, initial_head="main")
    files = repo_files()
    bob = sig("Bob Ops", "bob@example.org", 1_792_000_000)
    initial = commit(repo, dict(files), "Initial fleet", author=sig(when=1_791_000_000))

    prod = files[lane(PRODUCTION)].decode()
    old_image = next(line for line in prod.splitlines() if line.startswith("image:"))
    prod = prod.replace(old_image, old_image.split("@")[0] + "@" + NEW_DIGEST)
    prod = prod.replace("max_num_seqs: 16", "max_num_seqs: 32")
    prod = prod.replace('SGLANG_ENABLE_JIT_DEEPGEMM: "0"', 'SGLANG_ENABLE_JIT_DEEPGEMM: "0"\n  NCCL_DEBUG_SUBSYS: INIT')
    bump = commit(repo, {lane(PRODUCTION): prod.encode()}, "dsv41: new image, 32 sequences\n\nBody text.", author=bob)

    evidence_path = f"evidence/{PRODUCTION}/20261023T091500Z-{bump[:12]}.json"
    evidence = commit(
        repo, {evidence_path: b'{"benchmarks": []}\n'}, "evidence for dsv41", author=sig("lanes", "lanes@localhost")
    )

    glm = files[lane(GLM)].replace(b"hosts: [dgx1, dgx2, dgx3, dgx4]", b"hosts: [dgx5, dgx6, dgx7, dgx4]")
    glm_move = commit(repo, {lane(GLM): glm}, "glm53: move to the staging Sparks")

    # A side branch changing the port, merged: first-parent history sees the merge as the change.
    side = commit(
        repo,
        {lane(PRODUCTION): prod.replace("port: 8000", "port: 8001").encode()},
        "port on a branch",
        ref="refs/heads/side",
        parents=[glm_move],
    )
    main_tip = str(repo.references["refs/heads/main"].target)
    side_tree = repo[side].tree_id  # type: ignore[attr-defined]
    who = sig()
    merge_oid = repo.create_commit("refs/heads/main", who, who, "Merge branch 'side'", side_tree, [main_tip, side])
    merge = str(merge_oid)

    model_text = files[MODEL].replace(weight_line(), b"weight_bytes: 180000000000")
    model = commit(repo, {MODEL: model_text}, "deepseek: real weight size")
    remove = commit(repo, {lane(MINIMAX): None}, "minimax: drop the lane")
    broken = commit(repo, {lane(EUGR): b"image: [unclosed\n"}, "eugr: oops")
    repo.set_head("refs/heads/main")
    return Fleet(repo, path, initial, bump, evidence, glm_move, merge, model, remove, broken)


def test_diff_fields_dots_nested_keys_and_compares_lists_whole() -> None:
    changes = diff_fields(
        {"a": 1, "env": {"X": "1"}, "hosts": ["d1", "d2"]}, {"a": 2, "env": {"X": "1", "Y": "2"}, "hosts": ["d1", "d3"]}
    )
    assert [c.describe() for c in changes] == ["a: 1 -> 2", "env.Y: (unset) -> 2", "hosts: [d1, d2] -> [d1, d3]"]
    assert [c.describe() for c in diff_fields({"gone": True}, {})] == ["gone: true -> (unset)"]


def test_a_lanes_changes_newest_first_with_fields_notes_and_evidence(fleet: Fleet) -> None:
    write_verdict_note(
        fleet.repo, fleet.bump, {"lanes": [{"lane": PRODUCTION, "result": "applied", "timings": {"total": 4.6}}]}
    )
    changes = lane_history(fleet.repo, PRODUCTION)
    assert [c.commit for c in changes] == [fleet.model, fleet.merge, fleet.bump, fleet.initial]
    model, merge, bump, initial = changes

    assert bump.author == "Bob Ops" and bump.email == "bob@example.org" and bump.time == 1_792_000_000
    assert bump.subject == "dsv41: new image, 32 sequences"
    assert bump.status == "modified"
    described = [c.describe() for c in bump.fields]
    assert any(
        d.startswith("image: aidendle94/sparkrun-sglang-dsv41-gb10@sha256:f617") and d.endswith(NEW_DIGEST)
        for d in described
    )
    assert "max_num_seqs: 16 -> 32" in described
    assert "env.NCCL_DEBUG_SUBSYS: (unset) -> INIT" in described
    assert len(described) == 3
    assert bump.note is not None and f"lanes: applied {PRODUCTION}: healthy in 4.6 s" in bump.note
    assert bump.evidence == (f"evidence/{PRODUCTION}/20261023T091500Z-{fleet.bump[:12]}.json",)

    assert [c.describe() for c in merge.fields] == ["port: 8000 -> 8001"]
    assert merge.note is None and merge.evidence == ()

    assert model.status == "model"
    assert [(f.path, [c.describe() for c in f.fields]) for f in model.files] == [
        (MODEL, [f"weight_bytes: {old_weight()} -> 180000000000"])
    ]
    assert initial.status == "added"
    assert any(c.field == "hosts" and c.new == ["dgx1", "dgx2", "dgx3", "dgx4"] for c in initial.fields)


def test_hosts_moves_removals_and_broken_yaml(fleet: Fleet) -> None:
    glm = lane_history(fleet.repo, GLM)
    assert [c.commit for c in glm] == [fleet.glm_move, fleet.initial]
    assert [c.describe() for c in glm[0].fields] == ["hosts: [dgx1, dgx2, dgx3, dgx4] -> [dgx5, dgx6, dgx7, dgx4]"]

    minimax = lane_history(fleet.repo, MINIMAX)
    assert [c.status for c in minimax] == ["removed", "added"]

    eugr = lane_history(fleet.repo, EUGR)
    # The staging lane serves another model file (deepseek-v4-flash), so the 1017 model's change is not its history.
    assert [c.commit for c in eugr] == [fleet.broken, fleet.initial]
    lane_file = eugr[0].lane_file
    assert lane_file is not None and lane_file.error and "not valid YAML" in lane_file.error


def test_all_lanes_limit_and_rev(fleet: Fleet) -> None:
    everything = history(fleet.repo)
    assert set(everything) == {PRODUCTION, GLM, EUGR, MINIMAX}
    assert [c.commit for c in lane_history(fleet.repo, PRODUCTION, limit=1)] == [fleet.model]
    assert [c.commit for c in lane_history(fleet.repo, PRODUCTION, rev=fleet.bump)] == [fleet.bump, fleet.initial]
    assert lane_history(fleet.repo, "no-such-lane") == []


# -- the command ------------------------------------------------------------------------------

runner = CliRunner()


def cli() -> typer.Typer:
    app = typer.Typer()
    app.command("history")(history_cmd)

    @app.command("noop")
    def _noop() -> None:  # a second command keeps typer from collapsing the group
        return None

    return app


def journal(path: Path, fleet: Fleet) -> Path:
    db = path / "lanes.db"
    store = Store(db)
    store.record_apply("r1", PRODUCTION, fleet.initial, "fp0", "applied", None, 1_791_000_100.0, {"total": 812.4})
    store.record_apply("r2", PRODUCTION, fleet.bump, "fp1", "applied", None, 1_792_000_100.0, {"total": 4.6})
    store.record_apply(
        "r3", GLM, fleet.glm_move, None, "denied", "memory-budget: rank 0 needs 131.2 GiB > 97.4 GiB", 1.0, {}
    )
    store.record_apply(
        "r4",
        PRODUCTION,
        fleet.model,
        "fp2",
        "rolled-back",
        "no token in 10 s; rolled back to abc",
        2.0,
        {"total": 31.0},
    )
    store.close()
    return db


def test_history_json_joins_the_journal_and_notes(fleet: Fleet, tmp_path: Path) -> None:
    db = journal(tmp_path, fleet)
    write_verdict_note(
        fleet.repo,
        fleet.glm_move,
        {"lanes": [{"lane": GLM, "result": "denied", "rule": "memory-budget", "error": "x"}]},
    )
    result = runner.invoke(cli(), ["history", "--repo", str(fleet.path), "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data["lanes"]) == {PRODUCTION, GLM, EUGR, MINIMAX}
    prod = data["lanes"][PRODUCTION]
    assert [e["commit"] for e in prod] == [fleet.model, fleet.merge, fleet.bump, fleet.initial]
    assert prod[0]["applies"][0]["result"] == "rolled-back" and prod[0]["applies"][0]["timings"] == {"total": 31.0}
    assert prod[2]["applies"][0]["result"] == "applied"
    assert prod[2]["evidence"] and prod[2]["files"][0]["fields"]
    glm = data["lanes"][GLM][0]
    assert glm["applies"][0]["error"].startswith("memory-budget")
    assert glm["verdicts"] == [{"lane": GLM, "result": "denied", "rule": "memory-budget", "error": "x"}]

    one = runner.invoke(cli(), ["history", GLM, "--repo", str(fleet.path), "--db", str(db), "--json"])
    assert list(json.loads(one.stdout)["lanes"]) == [GLM]


def test_history_table_and_a_missing_journal(fleet: Fleet, tmp_path: Path) -> None:
    db = journal(tmp_path, fleet)
    result = runner.invoke(
        cli(), ["history", PRODUCTION, "--repo", str(fleet.path), "--db", str(db)], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    out = result.output
    print(out)
    assert PRODUCTION in out and fleet.bump[:12] in out
    assert "max_num_seqs: 16 -> 32" in out
    assert "applied in 4.6 s" in out
    assert "rolled-back in 31.0 s: no token in 10 s" in out
    assert "Bob Ops" in out
    # No journal: git history alone, and the file is not created.
    missing = tmp_path / "nowhere" / "lanes.db"
    result = runner.invoke(
        cli(), ["history", GLM, "--repo", str(fleet.path), "--db", str(missing)], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0 and "no record" in result.output
    assert f"no journal at {missing}" in "".join(result.output.split("\n"))  # a long path may wrap
    assert not missing.exists()


def test_history_of_a_bad_repo_or_rev_is_an_input_error(tmp_path: Path, fleet: Fleet) -> None:
    result = runner.invoke(cli(), ["history", "--repo", str(tmp_path / "nope")])
    assert result.exit_code == 2
    result = runner.invoke(cli(), ["history", "--repo", str(fleet.path), "--rev", "no-such-rev", "--json"])
    assert result.exit_code == 2 and "cannot resolve revision" in result.output
