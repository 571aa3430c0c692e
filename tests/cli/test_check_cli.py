"""`lanes check` through the real CLI on real git repositories."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from reconciler.cli.main import app
from tests.support.example import GLM, MINIMAX, PRODUCTION, ROOT, repo_files
from tests.support.gitrepo import commit_files, make_repo

pytestmark = pytest.mark.timeout(120)
runner = CliRunner()


def check(repo: Path, *extra: str) -> tuple[int, str]:
    result = runner.invoke(app, ["check", "--repo", str(repo), *extra])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_the_repos_own_state_passes_with_the_glm_lane_explained_by_numbers() -> None:
    code, out = check(ROOT, "--json")
    assert code == 0, out
    verdict = json.loads(out)
    assert verdict["ok"] is True and re.fullmatch(r"[0-9a-f]{40}", verdict["commit"])
    glm = [v for v in verdict["violations"] if v["lane"] == GLM]
    assert glm and all(v["severity"] == "warn" for v in glm)
    budget = next(v for v in glm if v["rule"] == "memory-budget")
    assert set(budget) == {"rule", "severity", "lane", "host", "rank", "message", "detail"}
    # vLLM's overhead (rules.yaml overhead_gib.vllm, 6.9 GiB) counts inside its budget with weights and KV.
    detail = budget["detail"]
    assert detail["need"] == detail["weights"] + detail["kv_min"] + detail["drafter"] + detail["overhead"], budget
    assert detail["flag"] == "--gpu-memory-utilization" and detail["ranks"] == "0,1,2,3"
    # Every lane's per-rank figures are in the payload, the ones that fit too.
    assert set(verdict["budgets"]) >= {GLM, MINIMAX, PRODUCTION}
    assert all(r["headroom"] == r["budget"] - r["need"] for r in verdict["budgets"][PRODUCTION]["ranks"])


def test_minimax_at_tp4_passes_when_switched_to_running(tmp_path: Path) -> None:
    files = repo_files()
    lane_path = f"state/lanes/{MINIMAX}.yaml"
    prod_path = f"state/lanes/{PRODUCTION}.yaml"
    files[lane_path] = files[lane_path].replace(b"desired: stopped", b"desired: running")
    files[prod_path] = files[prod_path].replace(b"desired: running", b"desired: stopped")
    make_repo(tmp_path, files)
    code, out = check(tmp_path, "--json")
    verdict = json.loads(out)
    assert code == 0, out
    # Only that its flags are not checked: FLARE publishes no parser to build a flag table from.
    assert [(v["rule"], v["severity"]) for v in verdict["violations"] if v["lane"] == MINIMAX] == [
        ("engine-flags", "warn")
    ]
    # Both on the same four Sparks: the host-sharing rule denies, naming both lanes.
    files[prod_path] = files[prod_path].replace(b"desired: stopped", b"desired: running")
    repo = pygit2.Repository(str(tmp_path))
    commit_files(repo, files)
    code, out = check(tmp_path, "--json")
    verdict = json.loads(out)
    assert code == 1
    sharing = [v for v in verdict["violations"] if v["rule"] == "host-sharing"]
    assert {v["lane"] for v in sharing} == {MINIMAX, PRODUCTION}


def test_the_human_output_shows_the_budget_table() -> None:
    code, out = check(ROOT)
    assert code == 0
    for word in ("weights", "KV", "overhead", "need", "budget", "headroom", PRODUCTION):
        assert word in out


def test_check_reads_the_commit_not_the_working_tree(tmp_path: Path) -> None:
    make_repo(tmp_path)
    (tmp_path / "state" / "lanes").mkdir(parents=True, exist_ok=True)
    (tmp_path / "state" / "lanes" / "broken.yaml").write_text("engine: [")
    code, out = check(tmp_path)
    assert code == 0
    assert "state/lanes/broken.yaml (new)" in out  # and it says what it did not check


def test_rev_selects_an_older_commit(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    first = str(repo.head.target)
    files = repo_files()
    files[f"state/lanes/{PRODUCTION}.yaml"] += b"\nbogus_field: 1\n"
    commit_files(repo, files)
    assert check(tmp_path)[0] == 2
    assert check(tmp_path, "--rev", first)[0] == 0
    code, out = check(tmp_path, "--rev", "no-such-branch")
    assert code == 2 and "no-such-branch" in out


def test_invalid_yaml_names_file_and_line(tmp_path: Path) -> None:
    files = repo_files()
    files[f"state/lanes/{PRODUCTION}.yaml"] = b"engine: sglang\nhosts: [dgx1, dgx2\nport: 8000\n"
    make_repo(tmp_path, files)
    code, out = check(tmp_path)
    assert code == 2
    assert f"state/lanes/{PRODUCTION}.yaml:" in out and "Traceback" not in out


def test_a_wrong_field_names_file_line_and_field_in_json(tmp_path: Path) -> None:
    files = repo_files()
    path = f"state/lanes/{PRODUCTION}.yaml"
    files[path] = files[path].replace(b"tp: 4", b"tp: four")
    make_repo(tmp_path, files)
    code, out = check(tmp_path, "--json")
    assert code == 2
    error = json.loads(out)
    assert error["file"] == path and error["field"] == "tp" and isinstance(error["line"], int)
    text = files[path].decode().splitlines()
    assert "tp: four" in text[error["line"] - 1]


def test_not_a_repository_is_bad_input(tmp_path: Path) -> None:
    code, out = check(tmp_path / "nowhere")
    assert code == 2 and "not a git repository" in out


MUTATIONS = ("unknown-field", "wrong-type", "missing-required", "broken-syntax", "not-a-mapping", "binary")
TARGETS = sorted(p for p in repo_files() if p.startswith("state/") and p.endswith(".yaml"))


def mutate(data: bytes, how: str, path: str, salt: int) -> bytes:
    if how == "unknown-field":
        return data + f"\nunexpected_field_{salt}: 1\n".encode()
    if how == "wrong-type":
        if b"\naddress:" in b"\n" + data:
            return re.sub(rb"(?m)^address: .*$", b"address: [1, 2]", data)
        if re.search(rb"(?m)^weight_bytes:", data):  # not a lane's offloaded_weight_bytes
            return re.sub(rb"(?m)^weight_bytes: .*$", b"weight_bytes: lots", data)
        if b"gpu_memory_utilization:" in data:
            return re.sub(rb"(?m)^gpu_memory_utilization: .*$", b"gpu_memory_utilization: high", data)
        if path.endswith("bench-profiles.yaml"):
            return re.sub(rb"(?m)^(\s+)repetitions: .*$", rb"\1repetitions: many", data, count=1)
        if path.endswith("upstreams.yaml"):
            return data.replace(b"kind: github-releases", b"kind: 12", 1)
        return re.sub(rb"(?m)^ssh_port: .*$", b"ssh_port: twenty-two", data)
    if how == "missing-required":
        for key in (b"engine:", b"address:", b"weight_bytes:", b"repo:", b"ssh_port:"):
            if re.search(rb"(?m)^\s*" + key, data):
                if key == b"ssh_port:":
                    return re.sub(rb"(?m)^ssh_port: .*$", b"ssh_port: -1", data)
                return re.sub(rb"(?m)^\s*" + key + rb".*$", b"", data, count=1)
        return data + b"\n  - kind: nothing\n"
    if how == "broken-syntax":
        return data + b"\nkey: [unclosed, \n  - : :\n"
    if how == "not-a-mapping":
        return b"- just\n- a list\n"
    return bytes([0xFF, 0xFE, salt % 256]) + data


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(target=st.sampled_from(TARGETS), how=st.sampled_from(MUTATIONS), salt=st.integers(0, 10_000))
def test_random_mutations_of_valid_yaml_exit_2_with_file_and_field(target: str, how: str, salt: int) -> None:
    files = repo_files()
    files[target] = mutate(files[target], how, target, salt)
    with tempfile.TemporaryDirectory() as tmp:
        make_repo(Path(tmp), files)
        code, out = check(Path(tmp), "--json")
    assert code == 2, (target, how, out)
    error = json.loads(out)
    assert error["ok"] is False and error["file"] == target, (how, error)
    if how in {"unknown-field", "wrong-type"}:
        assert error["field"], error
    assert "Traceback" not in out


def test_check_says_who_judged_each_lanes_flags_and_a_kept_image_refusal_denies(tmp_path: Path) -> None:
    from reconciler.cli.common import load_commit
    from reconciler.policy import evaluate
    from reconciler.policy.preflight import head_key
    from reconciler.store import preflight as kept
    from reconciler.store.journal import Store
    from tests.support.example import EUGR

    db = tmp_path / "lanes.db"
    code, out = check(ROOT, "--json", "--db", str(db))  # no journal yet: tables judge, or nothing
    judged = json.loads(out)["flags_judged"]
    assert code == 0
    assert judged[EUGR] == {"judged_by": "table", "table": "vllm-0.32.0", "how": "chosen", "exact": False}
    assert judged[MINIMAX] == {"judged_by": "none", "preflight": False}

    loaded = load_commit(str(ROOT), "HEAD")
    spec = evaluate(loaded.desired, loaded.policies).rendered[EUGR][0][1]
    found = head_key("vllm", spec)
    assert found is not None
    digest, argv, key = found
    store = Store(db)
    said = "vllm: error: unrecognized arguments: --enable-prefix-cachng"
    kept.record(store, key=key, engine="vllm", digest=digest, image=spec.image, argv=json.dumps(argv),
                outcome="refused", message=said, stderr="", host="dgx5", lane=EUGR)  # fmt: skip
    store.close()
    code, out = check(ROOT, "--json", "--db", str(db))
    verdict = json.loads(out)
    assert code == 1
    assert verdict["flags_judged"][EUGR]["judged_by"] == "image"
    assert verdict["flags_judged"][EUGR]["outcome"] == "refused"
    (deny,) = [v for v in verdict["violations"] if v["severity"] == "deny"]
    assert (deny["rule"], deny["lane"]) == ("engine-preflight", EUGR) and deny["message"].endswith(said)
    code, out = check(ROOT, "--db", str(db))
    assert f"{EUGR}: by its image's own parser on dgx5 (refused, kept verdict): {said}" in " ".join(out.split())


def test_a_flag_sglang_0523_refuses_as_ambiguous_fails_check_on_a_0523_lane(tmp_path: Path) -> None:
    # The production lane bumped to the release its upstream tracks, with --cuda-graph-max-bs, which 0.5.19
    # had beside its -decode and -prefill forms and 0.5.23 removed: 0.5.23's own table judges, as exact,
    # in argparse's words.
    files = repo_files()
    path = f"state/lanes/{PRODUCTION}.yaml"
    text = files[path].replace(b"engine_version: 0.0.0.dev1+gda64c5cbb", b"engine_version: 0.5.23")
    text = text.replace(b'  - "2048"\n', b'  - "2048"\n  - --cuda-graph-max-bs\n  - "16"\n')
    assert b"engine_version: 0.5.23 " in text and b"--cuda-graph-max-bs\n" in text
    files[path] = text
    make_repo(tmp_path, files)
    code, out = check(tmp_path, "--json")
    verdict = json.loads(out)
    assert code == 1, out
    assert verdict["flags_judged"][PRODUCTION] == {
        "judged_by": "table",
        "table": "sglang-0.5.23",
        "how": "release",
        "exact": True,
    }
    (deny,) = [v for v in verdict["violations"] if v["severity"] == "deny"]
    assert (deny["rule"], deny["lane"]) == ("engine-flags", PRODUCTION)
    assert deny["message"].endswith(
        "sglang 0.5.23 would refuse rank 0's command line: sglang serve: error: ambiguous option: "
        "--cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"
    )


def test_uncommitted_changes_are_named_and_checked_with_worktree(tmp_path: Path) -> None:
    """HEAD passes; the file on disk does not: `check` says the edit is not what it checked; --worktree checks it."""
    repo = tmp_path / "state"
    make_repo(repo)
    lane = repo / "state" / "lanes" / f"{PRODUCTION}.yaml"
    text = lane.read_text()
    assert "@sha256:" in text
    lane.write_text(re.sub(r"@sha256:[0-9a-f]{64}", ":latest", text))  # unpinned: image-digest denies it
    result = runner.invoke(app, ["check", "--repo", str(repo), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["ok"] is True and out["exit_code"] == 0
    assert out["uncommitted"] == [{"path": f"state/lanes/{PRODUCTION}.yaml", "status": "modified"}]
    assert f"uncommitted changes are not checked (this checks HEAD {out['commit'][:12]})" in result.stderr
    assert "--worktree" in result.stderr
    result = runner.invoke(app, ["check", "--repo", str(repo), "--json", "--worktree"])
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert out["ok"] is False and out["exit_code"] == 1 and out["worktree"] is True
    assert any(v["rule"] == "image-digest" and v["lane"] == PRODUCTION for v in out["violations"])
    assert pygit2.Repository(str(repo)).status() == {
        f"state/lanes/{PRODUCTION}.yaml": pygit2.enums.FileStatus.WT_MODIFIED
    }
