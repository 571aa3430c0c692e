"""Run the model folders script for real with this machine's python3, on temporary folders.

Sizes are worked out here from the bytes the test wrote; a removal is checked on the disk, not by the
script's own answer alone.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from reconciler.facts.modelfolders import (
    REFUSED_EXIT,
    head_argv,
    list_input,
    modelfolders_argv,
    parse_listing,
    parse_removal,
    remove_input,
)

pytestmark = pytest.mark.timeout(30)


def run(argv: list[str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=20, check=False)


@pytest.fixture
def models(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    for name, size in (("used", 10), ("old-a", 1000), ("old-b", 2500)):
        (root / name / "sub").mkdir(parents=True)
        (root / name / "sub" / "w.bin").write_bytes(os.urandom(size))
    os.link(root / "old-b" / "sub" / "w.bin", root / "old-b" / "again.bin")  # one inode, counted once
    (root / "old-b" / "link.bin").symlink_to(root / "used" / "sub" / "w.bin")  # a link's target is not counted
    (root / ".hidden").mkdir()
    (root / "lost+found").mkdir()
    (root / "pointer").symlink_to(root / "used")  # a symlink to a folder: never listed
    (root / "file.txt").write_bytes(b"x")
    return root


def test_the_listing_names_unused_folders_with_their_bytes(models: Path, tmp_path: Path) -> None:
    absent = str(tmp_path / "nowhere")
    done = run(modelfolders_argv(), list_input([str(models), absent], [str(models / "used")]))
    assert done.returncode == 0, done.stderr
    listing = parse_listing(done.stdout)
    assert [(f.path, f.bytes) for f in listing.folders] == [
        (str(models / "old-a"), 1000),
        (str(models / "old-b"), 2500),
    ]
    assert listing.absent == (absent,) and listing.errors == ()


@pytest.mark.parametrize("name", ["used", "pointer", "file.txt", ".hidden", "../models/old-a", "gone"])
def test_removal_refuses_what_is_not_an_unused_folder(models: Path, name: str) -> None:
    path = str(models / name) if not name.startswith("..") else f"{models}/{name}"
    done = run(modelfolders_argv(), remove_input(path, [str(models)], [str(models / "used")]))
    assert done.returncode == REFUSED_EXIT and "refused" in done.stderr
    assert (models / "used" / "sub" / "w.bin").exists() and (models / "old-a").is_dir()


def test_removal_outside_the_parents_is_refused(models: Path, tmp_path: Path) -> None:
    done = run(modelfolders_argv(), remove_input(str(models / "old-a"), [str(tmp_path / "elsewhere")], []))
    assert done.returncode == REFUSED_EXIT and (models / "old-a").is_dir()


def test_removal_removes_the_folder_and_not_what_its_links_point_to(models: Path) -> None:
    done = run(modelfolders_argv(), remove_input(str(models / "old-b"), [str(models)], [str(models / "used")]))
    assert done.returncode == 0, done.stderr
    removal = parse_removal(done.stdout)
    assert (removal.path, removal.removed, removal.bytes) == (str(models / "old-b"), True, 2500)
    assert not (models / "old-b").exists()
    assert (models / "used" / "sub" / "w.bin").stat().st_size == 10


def test_bad_arguments_exit_2() -> None:
    assert run(modelfolders_argv(), json.dumps({"mode": "nuke", "parents": ["/x"], "keep": []})).returncode == 2
    assert run(modelfolders_argv(), "not json").returncode == 2


def test_head_reads_a_small_file(models: Path) -> None:
    (models / "used" / "index.json").write_text('{"weight_map": {}}')
    done = run(head_argv(str(models / "used" / "index.json")))
    assert (done.returncode, done.stdout) == (0, '{"weight_map": {}}')
