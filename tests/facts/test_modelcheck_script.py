"""Run the model check script for real with this machine's python3, on temporary model folders.

Each expectation is worked out here from the files the test wrote (hashlib,
os.statvfs), never by the script's own parser or helpers.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from reconciler.facts.modelcheck import (
    check_input,
    hash_input,
    modelcheck_argv,
    needed,
    parse_model_check,
    parse_tree_hash,
)

pytestmark = pytest.mark.timeout(60)

FILES = {
    "config.json": b'{"architectures": ["X"]}\n',
    "model-00001-of-00002.safetensors": os.urandom(300_000),
    "model-00002-of-00002.safetensors": os.urandom(200_001),
    "sub/tokenizer.json": b'{"tok": 1}' * 1000,
}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


MANIFEST = [(p, len(d), sha(d)) for p, d in sorted(FILES.items())]


def run(stdin: str) -> str:
    out = subprocess.run(modelcheck_argv(), input=stdin, capture_output=True, text=True, timeout=30, check=True)
    assert out.stderr == ""
    return out.stdout


def check(root: Path, workers: int = 4) -> dict[str, object]:
    raw = json.loads(run(check_input(str(root), MANIFEST, workers=workers)))
    assert isinstance(raw, dict)
    return raw


def write_all(root: Path) -> None:
    for path, data in FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)


def states(raw: dict[str, object]) -> dict[str, str]:
    files = raw["files"]
    assert isinstance(files, dict)
    return {p: f["state"] for p, f in files.items()}


def test_a_complete_copy_is_ok_and_says_the_free_space_of_its_filesystem(tmp_path: Path) -> None:
    root = tmp_path / "models" / "X"
    write_all(root)

    raw = check(root)

    assert states(raw) == dict.fromkeys(FILES, "ok")
    assert raw["exists"] is True and raw["root"] == str(root) and raw["errors"] == []
    vfs = os.statvfs(root)
    assert abs(int(str(raw["free_bytes"])) - vfs.f_bavail * vfs.f_frsize) < 64 << 20  # others write meanwhile
    assert sorted(raw["hashed"]) == sorted(FILES)  # type: ignore[call-overload]
    parsed = parse_model_check(json.dumps(raw))
    assert parsed.complete and needed(parsed) == []
    assert parsed.files["sub/tokenizer.json"].size == 10_000


def test_a_missing_root_is_every_file_missing_with_the_free_space_of_the_nearest_folder(tmp_path: Path) -> None:
    root = tmp_path / "not" / "yet" / "X"

    parsed = parse_model_check(run(check_input(str(root), MANIFEST)))

    assert not parsed.exists and parsed.errors == ()
    assert {p: f.state for p, f in parsed.files.items()} == dict.fromkeys(FILES, "missing")
    assert needed(parsed) == sorted(FILES)
    vfs = os.statvfs(tmp_path)
    assert parsed.free_bytes is not None and abs(parsed.free_bytes - vfs.f_bavail * vfs.f_frsize) < 64 << 20
    assert not (tmp_path / "not").exists(), "a check makes nothing"


def test_missing_short_partial_dir_larger_and_flipped_files(tmp_path: Path) -> None:
    root = tmp_path / "X"
    write_all(root)
    (root / "config.json").unlink()  # missing
    first = root / "model-00001-of-00002.safetensors"
    first.write_bytes(FILES[first.name][:1000])  # present and short: partial
    second = root / "model-00002-of-00002.safetensors"
    second.unlink()  # absent, with what rsync kept of it in the partial dir beside where it goes
    (root / ".lanes-partial").mkdir()
    (root / ".lanes-partial" / second.name).write_bytes(FILES[second.name][:4096])
    tok = root / "sub" / "tokenizer.json"
    tok.write_bytes(b"X" + FILES["sub/tokenizer.json"][1:])  # same size, one byte flipped

    parsed = parse_model_check(run(check_input(str(root), MANIFEST)))

    got = {p: (f.state, f.size, f.partial_bytes) for p, f in parsed.files.items()}
    assert got == {
        "config.json": ("missing", 0, 0),
        "model-00001-of-00002.safetensors": ("partial", 1000, 0),
        "model-00002-of-00002.safetensors": ("partial", 0, 4096),
        "sub/tokenizer.json": ("mismatch", 10_000, 0),
    }
    assert parsed.hashed == ("sub/tokenizer.json",), "only a file of the manifest's size is hashed"
    tok.write_bytes(FILES["sub/tokenizer.json"] + b"\n")  # larger: mismatch without reading it
    parsed = parse_model_check(run(check_input(str(root), MANIFEST)))
    assert parsed.files["sub/tokenizer.json"] == parsed.files["sub/tokenizer.json"].__class__("mismatch", 10_001, 0)
    assert parsed.hashed == ()


def test_a_partial_of_a_file_in_a_subfolder_is_in_that_subfolders_partial_dir(tmp_path: Path) -> None:
    # rsync makes a relative --partial-dir in the destination file's own folder.
    root = tmp_path / "X"
    write_all(root)
    (root / "sub" / "tokenizer.json").unlink()
    (root / "sub" / ".lanes-partial").mkdir()
    (root / "sub" / ".lanes-partial" / "tokenizer.json").write_bytes(b"x" * 777)

    parsed = parse_model_check(run(check_input(str(root), MANIFEST)))

    assert parsed.files["sub/tokenizer.json"].state == "partial"
    assert parsed.files["sub/tokenizer.json"].partial_bytes == 777


def test_the_stamp_spares_hashing_an_unchanged_file_and_notices_a_flipped_byte_with_mtime_restored(
    tmp_path: Path,
) -> None:
    root = tmp_path / "X"
    write_all(root)
    assert sorted(check(root)["hashed"]) == sorted(FILES)  # type: ignore[call-overload]
    stamp = json.loads((root / ".lanes-verified.json").read_text())
    st = (root / "config.json").stat()
    assert stamp["config.json"] == [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, sha(FILES["config.json"])]

    again = check(root)
    assert again["hashed"] == [] and states(again) == dict.fromkeys(FILES, "ok")

    # One byte rewritten in place, then mtime put back: size and mtime are the stamp's, ctime is not.
    target = root / "model-00001-of-00002.safetensors"
    before = target.stat()
    with open(target, "r+b") as f:
        f.seek(12_345)
        f.write(bytes([FILES[target.name][12_345] ^ 0xFF]))
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert target.stat().st_mtime_ns == before.st_mtime_ns and target.stat().st_size == before.st_size

    flipped = check(root)
    assert flipped["hashed"] == [target.name]
    assert states(flipped)[target.name] == "mismatch"
    assert {s for p, s in states(flipped).items() if p != target.name} == {"ok"}
    # the mismatch is remembered too: the next check hashes nothing and still says mismatch
    third = check(root)
    assert third["hashed"] == [] and states(third)[target.name] == "mismatch"


def test_without_the_stamp_written_every_file_is_hashed_again(tmp_path: Path) -> None:
    # The same check twice, the stamp removed in between: the figure the stamp saves is every file.
    root = tmp_path / "X"
    write_all(root)
    check(root, workers=1)
    (root / ".lanes-verified.json").unlink()
    assert sorted(check(root, workers=1)["hashed"]) == sorted(FILES)  # type: ignore[call-overload]


def test_a_file_replaced_by_another_of_the_same_size_and_mtime_is_hashed(tmp_path: Path) -> None:
    root = tmp_path / "X"
    write_all(root)
    check(root)
    target = root / "sub" / "tokenizer.json"
    st = target.stat()
    other = tmp_path / "other"
    other.write_bytes(b"Y" * st.st_size)
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    other.replace(target)

    raw = check(root)

    assert raw["hashed"] == ["sub/tokenizer.json"] and states(raw)["sub/tokenizer.json"] == "mismatch"


def test_hash_mode_lists_every_regular_file_but_partials_and_the_stamp(tmp_path: Path) -> None:
    root = tmp_path / "X"
    write_all(root)
    check(root)  # leaves a stamp
    (root / ".lanes-partial").mkdir()
    (root / ".lanes-partial" / "half.bin").write_bytes(b"h" * 10)
    (root / "sub" / ".lanes-partial").mkdir()
    (root / "sub" / ".lanes-partial" / "tokenizer.json").write_bytes(b"h" * 10)
    blob = tmp_path / "blob"
    blob.write_bytes(b"linked")
    (root / "linked.txt").symlink_to(blob)  # as an HF snapshot's files are links to blobs

    tree = parse_tree_hash(run(hash_input(str(root), workers=3)))

    want = sorted([*MANIFEST, ("linked.txt", 6, sha(b"linked"))])
    assert [(f.path, f.size, f.sha256) for f in tree.files] == want
    assert tree.total_bytes == sum(len(d) for d in FILES.values()) + 6
    assert tree.exists and tree.errors == ()
    assert sorted(tree.hashed) == ["linked.txt"], "the stamp vouched for the others"


def test_hash_mode_of_a_missing_folder_is_empty_and_says_so(tmp_path: Path) -> None:
    tree = parse_tree_hash(run(hash_input(str(tmp_path / "nope"))))
    assert not tree.exists and tree.files == ()


def test_bad_arguments_exit_2() -> None:
    out = subprocess.run(modelcheck_argv(), input='{"mode": "x", "root": "/"}', capture_output=True, text=True,
                         timeout=30, check=False)  # fmt: skip
    assert out.returncode == 2 and "bad arguments" in out.stderr


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("nope", "not JSON"),
        ("[]", "not a JSON object"),
        ('{"mode": "hash"}', "mode 'hash'"),
        ('{"mode": "check", "root": "/", "exists": true, "errors": [], "hashed": [], "free_bytes": -1}', "free_bytes"),
        ('{"mode": "check", "root": "/", "exists": true, "errors": [], "hashed": [], "files": {"a": {"state": "?"}}}',
         "a: bad entry"),
    ],
)  # fmt: skip
def test_malformed_output_is_refused_with_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_model_check(text)
