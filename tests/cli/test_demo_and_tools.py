"""`lanes demo --once --json`, `lanes init`, `lanes schema` and `lanes model describe` as a person runs them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pygit2
import pytest
from ruamel.yaml import YAML
from typer.testing import CliRunner

from reconciler.cli.main import app
from tests.support.example import EUGR, PRODUCTION, ROOT

runner = CliRunner()


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_demo_once_converges_the_example_fleet_and_a_second_cycle_has_nothing_to_do() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler.cli.main", "demo", "--once", "--json", "--repo", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    print(f"\ndemo converged in {out['seconds']} s")
    assert out["converged"] is True and out["second_plan_empty"] is True
    lanes = {row["name"]: row for row in out["lanes"]}
    assert lanes[PRODUCTION]["health"] == "healthy" and lanes[PRODUCTION]["hosts"] == ["dgx1", "dgx2", "dgx3", "dgx4"]
    assert lanes[EUGR]["health"] == "healthy" and lanes[EUGR]["hosts"] == ["dgx5", "dgx6", "dgx7"]
    assert {row["health"] for row in out["lanes"] if row["desired"] == "stopped"} == {"stopped"}
    for row in out["lanes"]:
        assert set(row) >= {"name", "desired", "health", "commit", "hosts", "last_error"}


@pytest.mark.timeout(60)
def test_init_scaffolds_a_repo_that_passes_check(tmp_path: Path) -> None:
    target = tmp_path / "fleet"
    result = runner.invoke(app, ["init", str(target)])
    assert result.exit_code == 0, result.output
    assert (target / "policies" / "rules.yaml").is_file() and not (target / "policies").is_symlink()
    # Committed by init: check reads commits, and passes at once.
    repo = pygit2.Repository(str(target))
    assert not repo.head_is_unborn and repo.head.shorthand == "main" and not repo.status()
    check = runner.invoke(app, ["check", "--repo", str(target), "--json"])
    assert check.exit_code == 0, check.output
    # Every $schema line points to a file that is there.
    for path in [*target.glob("state/**/*.yaml"), *target.glob("policies/*.yaml")]:
        for ref in re.findall(r"\$schema=(\S+)", path.read_text()):
            assert (path.parent / ref).is_file(), (path, ref)
    workflow = YAML(typ="safe").load((target / ".github" / "workflows" / "lanes-check.yml").read_text())
    assert any("lanes check" in str(step.get("run", "")) for step in workflow["jobs"]["check"]["steps"])
    assert repo.config["core.hooksPath"] == "hooks" and os.access(target / "hooks" / "pre-commit", os.X_OK)
    again = runner.invoke(app, ["init", str(target)])
    assert again.exit_code == 2 and "not empty" in again.output


@pytest.mark.timeout(60)
def test_the_pre_commit_hook_refuses_a_commit_lanes_check_denies(tmp_path: Path) -> None:
    target = tmp_path / "fleet"
    assert runner.invoke(app, ["init", str(target)]).exit_code == 0
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env |= {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
    lane = next((target / "state" / "lanes").glob("*.yaml"))
    lane.write_text(lane.read_text() + "no_such_field: 1\n")

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "-C", str(target), *args], capture_output=True, text=True, env=env, timeout=50, check=False
        )

    assert git("add", "-A").returncode == 0
    refused = git("commit", "-m", "a field lanes does not know")
    assert refused.returncode != 0, refused.stdout + refused.stderr  # git exits 1 whatever the hook exits
    assert "no_such_field" in refused.stdout + refused.stderr
    assert git("rev-list", "--count", "HEAD").stdout.strip() == "1"
    lane.write_text(lane.read_text().replace("no_such_field: 1\n", ""))
    assert git("add", "-A").returncode == 0
    done = git("commit", "--allow-empty", "-m", "fine again")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.timeout(60)
def test_schema_writes_one_json_schema_per_file_kind(tmp_path: Path) -> None:
    result = runner.invoke(app, ["schema", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    kinds = {p.name for p in tmp_path.glob("*.schema.json")}
    assert {"lane.schema.json", "host.schema.json", "model.schema.json", "fleet.schema.json"} <= kinds
    lane = json.loads((tmp_path / "lane.schema.json").read_text())
    assert lane["additionalProperties"] is False and "name" not in lane.get("required", [])
    assert "engine" in lane["required"]


@pytest.mark.timeout(60)
def test_model_describe_prints_a_model_file(tmp_path: Path) -> None:
    ckpt = tmp_path / "Tiny-GQA"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "num_hidden_layers": 4,
                "num_attention_heads": 8,
                "num_key_value_heads": 2,
                "hidden_size": 512,
                "head_dim": 64,
                "max_position_embeddings": 4096,
            }
        )
    )
    (ckpt / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 123456789}, "weight_map": {}})
    )
    result = runner.invoke(app, ["model", "describe", str(ckpt), "--host-path", "/models/Tiny-GQA"])
    assert result.exit_code == 0, result.output
    data = YAML(typ="safe").load(result.output)
    assert data["weight_bytes"] == 123456789 and data["architecture"]["attention"] == "gqa"
    assert data["architecture"]["kv_heads"] == 2 and data["path"] == "/models/Tiny-GQA"
    broken = runner.invoke(app, ["model", "describe", str(tmp_path)])
    assert broken.exit_code == 2 and "config.json" in broken.output


@pytest.mark.timeout(60)
def test_model_describe_reads_repo_and_revision_from_an_hf_cache_snapshot(tmp_path: Path) -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen3-8B" / "snapshots" / sha
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 36, "num_attention_heads": 32,
        "num_key_value_heads": 8, "hidden_size": 4096, "head_dim": 128, "max_position_embeddings": 40960,
    }))  # fmt: skip
    (snapshot / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 16381470720}}))
    result = runner.invoke(app, ["model", "describe", str(snapshot), "--host-path", "/srv/models/qwen3-8b"])
    assert result.exit_code == 0, result.output
    data = YAML(typ="safe").load(result.output)
    assert (data["hf_repo"], data["revision"]) == ("Qwen/Qwen3-8B", sha)
    assert "unknown/" not in result.output and "revision not set" not in result.output
    # Flags win over the path; a revision that is not a commit sha is bad input.
    other = "f" * 40
    result = runner.invoke(app, ["model", "describe", str(snapshot), "--hf-repo", "me/q", "--revision", other])
    data = YAML(typ="safe").load(result.output)
    assert (data["hf_repo"], data["revision"]) == ("me/q", other)
    assert runner.invoke(app, ["model", "describe", str(snapshot), "--revision", "main"]).exit_code == 2
