"""`lanes model manifest MODEL --from DIR`: the manifest of a real folder, every sha256 computed here with hashlib.

The command runs as a person runs it (a process, in a pipe); its manifest is read back from the work tree,
compared with the figures the test worked out, committed, and loaded as the reconciler loads state.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pygit2
import pytest

from reconciler.source.loadcommit import load_commit
from reconciler.spec.manifest import parse_manifest
from tests.support.gitrepo import commit_files, make_repo
from tests.support.lanesproc import run_lanes
from tests.support.simfleet import state_files

pytestmark = pytest.mark.timeout(120)  # a few `lanes` processes per test, on a busy machine

SHA = "0" * 40  # the model file's pinned revision (tests/support/simfleet.py)
SNAPSHOT = "1234567890abcdef1234567890abcdef12345678"


def checkpoint(root: Path, *, weight_total: int | None = None) -> dict[str, bytes]:
    """A small multi-file checkpoint with real, random bytes: config, two shards, their index, a subfolder."""
    shard1, shard2 = os.urandom(3_000_017), os.urandom(1_999_993)
    index = {
        "metadata": {"total_size": weight_total if weight_total is not None else len(shard1) + len(shard2) - 200},
        "weight_map": {"a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00002-of-00002.safetensors"},
    }
    files = {
        "config.json": b'{"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 36}\n',
        "model-00001-of-00002.safetensors": shard1,
        "model-00002-of-00002.safetensors": shard2,
        "model.safetensors.index.json": json.dumps(index).encode(),
        "tokenizer/tokenizer.json": os.urandom(4096),
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def expected(files: dict[str, bytes]) -> list[dict[str, object]]:
    return [
        {"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for rel, data in sorted(files.items())
    ]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A state repo with its work tree written out (the command reads the model file and writes beside it)."""
    path = tmp_path / "repo"
    files = state_files(dict.fromkeys(("spark1", "spark2", "spark3"), "192.0.2.1"), 22, "root")
    # weight_bytes of the model file: the shards' tensors (3,000,017 + 1,999,993 - 200 header bytes)
    model = "state/models/qwen.yaml"
    files[model] = files[model].replace(b"weight_bytes: 16000000000", b"weight_bytes: 4999810")
    for rel, data in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(data)
    make_repo(path, files)
    return path


async def manifest(repo: Path, source: Path | str, *extra: str) -> tuple[int, dict[str, Any], str]:
    code, out, err = await run_lanes(
        "model", "manifest", "qwen", "--from", str(source), "--repo", str(repo), "--json", *extra
    )
    return code, json.loads(out), err


async def test_a_folders_manifest_lists_every_file_with_its_sha256(repo: Path, tmp_path: Path) -> None:
    folder = tmp_path / "qwen"
    files = checkpoint(folder)
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_bytes(b"ref: refs/heads/main\n")
    (folder / ".lanes-partial").mkdir()
    (folder / ".lanes-partial" / "model-00002-of-00002.safetensors").write_bytes(b"half")
    code, out, err = await manifest(repo, folder)
    assert code == 0, err
    total = sum(len(d) for d in files.values())
    assert out["files"] == 5 and out["total_bytes"] == total
    assert out["index"] == "model.safetensors.index.json"
    assert (out["revision"], out["revision_from"]) == (SHA, "the model file's revision")
    assert out["left_out"] == [".git/", ".lanes-partial/"] and out["warnings"] == []
    text = (repo / "state/models/qwen.manifest.json").read_text()
    doc = json.loads(text)
    assert doc == {
        "model": "qwen",
        "revision": SHA,
        "index": "model.safetensors.index.json",
        "files": expected(files),
        "total_bytes": total,
    }
    assert list(doc) == ["model", "revision", "index", "files", "total_bytes"]
    # Committed, it is what the reconciler loads.
    files_now = {str(p.relative_to(repo)): p.read_bytes() for p in (repo / "state").rglob("*") if p.is_file()}
    files_now.update({str(p.relative_to(repo)): p.read_bytes() for p in (repo / "policies").rglob("*") if p.is_file()})
    commit_files(pygit2.Repository(str(repo)), files_now, "manifest")
    loaded = load_commit(repo)
    assert loaded.desired.manifests["qwen"] == parse_manifest("m", text.encode())


async def test_a_person_reads_one_summary_line_and_what_to_do_next(repo: Path, tmp_path: Path) -> None:
    checkpoint(tmp_path / "qwen")
    code, out, err = await run_lanes("model", "manifest", "qwen", "--from", str(tmp_path / "qwen"), "--repo", str(repo))
    assert code == 0, err
    assert out.startswith("wrote state/models/qwen.manifest.json: 5 files, 5.0 MB")
    assert "review and commit it: git add state/models/qwen.manifest.json" in out


def hf_cache(tmp_path: Path) -> tuple[Path, Path, dict[str, bytes]]:
    """A Hugging Face cache repo folder: blobs named by their sha256, a snapshot of links to them, refs/main."""
    cache = tmp_path / "hub" / "models--Qwen--Qwen3-8B"
    files = checkpoint(tmp_path / "staging")
    snapshot = cache / "snapshots" / SNAPSHOT
    for rel, data in files.items():
        blob = cache / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (cache / "refs").mkdir()
    (cache / "refs" / "main").write_text(SNAPSHOT)
    return cache, snapshot, files


async def test_a_hugging_face_cache_gives_the_revision_and_links_are_read_through(repo: Path, tmp_path: Path) -> None:
    cache, snapshot, files = hf_cache(tmp_path)
    for source, how in ((snapshot, "the snapshot folder's name"), (cache, "its refs/main")):
        code, out, err = await manifest(repo, source)
        assert code == 0, err
        assert (out["revision"], out["revision_from"]) == (SNAPSHOT, how)
        # The model file pins another revision: said, not refused.
        assert any(f"pins revision {SHA} but these files are {SNAPSHOT}" in w for w in out["warnings"])
        doc = json.loads((repo / "state/models/qwen.manifest.json").read_text())
        assert doc["files"] == expected(files)
    code, out, _ = await manifest(repo, snapshot, "--revision", "f" * 40)
    assert code == 2 and out["field"] == "--revision" and SNAPSHOT in str(out["error"])


async def test_hf_download_metadata_gives_the_revision(repo: Path, tmp_path: Path) -> None:
    folder = tmp_path / "qwen"
    checkpoint(folder)
    meta = folder / ".cache" / "huggingface" / "download"
    meta.mkdir(parents=True)
    (meta / "config.json.metadata").write_text(f"{SNAPSHOT}\n{'a' * 40}\n1712656091.123\n")
    code, out, err = await manifest(repo, folder)
    assert code == 0, err
    assert (out["revision"], out["left_out"]) == (SNAPSHOT, [".cache/huggingface/"])
    assert "hf download metadata" in str(out["revision_from"])


async def test_an_index_naming_a_shard_the_folder_lacks_is_refused(repo: Path, tmp_path: Path) -> None:
    folder = tmp_path / "qwen"
    checkpoint(folder)
    (folder / "model-00002-of-00002.safetensors").unlink()
    code, out, _ = await manifest(repo, folder)
    assert code == 2
    assert out["field"] == "weight_map" and str(out["file"]).endswith("model.safetensors.index.json")
    assert "model-00002-of-00002.safetensors" in str(out["error"])
    assert not (repo / "state/models/qwen.manifest.json").exists()


async def test_weight_bytes_that_disagree_with_the_index_are_warned_about(repo: Path, tmp_path: Path) -> None:
    checkpoint(tmp_path / "qwen", weight_total=9_000_000)
    code, out, err = await manifest(repo, tmp_path / "qwen")
    assert code == 0, err
    [warning] = out["warnings"]
    assert "weight_bytes is 4999810" in warning and "total_size is 9000000" in warning


async def test_an_unknown_model_or_a_missing_folder_is_bad_input(repo: Path, tmp_path: Path) -> None:
    code, text, _ = await run_lanes("model", "manifest", "nope", "--from", str(tmp_path), "--repo", str(repo), "--json")
    assert code == 2 and json.loads(text)["field"] == "MODEL"
    code, out, _ = await manifest(repo, tmp_path / "absent")
    assert code == 2 and "not a folder" in out["error"]
