"""Run the model check script for real with this machine's python3, on temporary model folders.

Each expectation is worked out here from the files the test wrote (hashlib,
os.statvfs), never by the script's own parser or helpers.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.facts.modelcheck import (
    ModelCheck,
    check_input,
    follow_input,
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
    larger = parsed.files["sub/tokenizer.json"]
    assert (larger.state, larger.size, larger.partial_bytes) == ("mismatch", 10_001, 0)
    st = tok.stat()
    assert larger.ident == (st.st_ino, st.st_ctime_ns)
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


def test_a_check_of_some_files_keeps_the_stamps_of_the_others(tmp_path: Path) -> None:
    root = tmp_path / "X"
    write_all(root)
    check(root)
    one = [m for m in MANIFEST if m[0] == "config.json"]
    (root / "config.json").write_bytes(FILES["config.json"])  # rewritten: its stamp no longer holds

    partial_run = json.loads(run(check_input(str(root), one)))

    assert partial_run["hashed"] == ["config.json"]
    assert check(root)["hashed"] == [], "the other files' stamps survived the check of one file"


def rename_in(root: Path, path: str, data: bytes) -> None:
    """As rsync does: write elsewhere, then rename into place."""
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    tmp = root / ".tmp-incoming"
    tmp.write_bytes(data)
    tmp.replace(root / path)


STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _no_process_left() -> Iterator[None]:
    yield
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


FAR = 600.0
"""A follower's deadline far past the test's own timeout (60 s): one that answers did so because its files came."""


def follow(root: Path, deadline_s: float = FAR, files: list[tuple[str, int, str]] = MANIFEST,
           before: ModelCheck | None = None) -> subprocess.Popen[str]:  # fmt: skip
    proc = subprocess.Popen(modelcheck_argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    STARTED.append(proc)
    assert proc.stdin is not None
    known = before.files if before is not None else None
    proc.stdin.write(follow_input(str(root), files, deadline_s=deadline_s, poll_s=0.05, before=known))
    proc.stdin.close()
    proc.stdin = None  # closed: `communicate` must not flush it
    return proc


def still_waiting(proc: subprocess.Popen[str]) -> bool:
    """Two keep-alive newlines in a row: it went over its files at least twice and took none of the awaited.

    The script writes a newline on its first pass and then every second; once it has taken every file it
    leaves the loop and its next line is the answer, so a second bare newline means it is still waiting.
    """
    assert proc.stdout is not None
    return [proc.stdout.readline(), proc.stdout.readline()] == ["\n", "\n"]


def answer(proc: subprocess.Popen[str]) -> str:
    # Bounded only so that a follower that never answers fails the test instead of hanging it.
    out, _ = proc.communicate(timeout=30)
    return out


def test_follow_hashes_files_as_they_are_renamed_into_place_and_answers_as_a_check(tmp_path: Path) -> None:
    root = tmp_path / "X"  # not even there yet: rsync --mkpath makes it
    proc = follow(root, before=parse_model_check(run(check_input(str(root), MANIFEST))))
    assert still_waiting(proc), "it waits for the files"
    for path, data in sorted(FILES.items()):
        rename_in(root, path, data)
    out = answer(proc)  # its deadline is far off: it answered because the files came

    assert proc.returncode == 0
    parsed = parse_model_check(out)
    assert parsed.complete and sorted(parsed.hashed) == sorted(FILES)
    assert check(root)["hashed"] == [], "its stamps hold for the next check"


def test_follow_waits_for_a_wrong_file_to_be_replaced_not_for_its_size(tmp_path: Path) -> None:
    root = tmp_path / "X"
    write_all(root)
    shard = "model-00001-of-00002.safetensors"
    (root / shard).write_bytes(b"\0" * len(FILES[shard]))  # right size, wrong bytes: what a copy will replace
    first = parse_model_check(run(check_input(str(root), MANIFEST)))
    proc = follow(root, files=[m for m in MANIFEST if m[0] == shard], before=first)  # the file being copied
    assert still_waiting(proc), "the file there at the start is not taken for the copy"

    rename_in(root, shard, FILES[shard])
    out = answer(proc)  # done once the new file is in place: its deadline is far off

    parsed = parse_model_check(out)
    assert parsed.complete, parsed
    assert parsed.hashed == (shard,)


def test_follow_gives_up_at_its_deadline_and_says_what_never_came(tmp_path: Path) -> None:
    root = tmp_path / "X"
    write_all(root)
    (root / "config.json").unlink()
    proc = follow(root, deadline_s=1.0)
    out = answer(proc)
    parsed = parse_model_check(out)
    assert parsed.files["config.json"].state == "missing"
    assert needed(parsed) == ["config.json"]


def test_follow_stops_when_its_reader_is_gone(tmp_path: Path) -> None:
    proc = follow(tmp_path / "never")
    time.sleep(0.2)
    assert proc.stdout is not None
    proc.stdout.close()
    assert proc.wait(timeout=10) == 3


def test_follow_takes_a_file_that_landed_before_it_started_given_the_first_checks_identities(tmp_path: Path) -> None:
    # The copy of a small file can be over before the follower starts: the first check (made before the copy)
    # says which file was there, so the one found at start counts as the copy.
    root = tmp_path / "X"
    write_all(root)
    shard = "model-00002-of-00002.safetensors"
    (root / shard).write_bytes(b"\0" * len(FILES[shard]))
    first = parse_model_check(run(check_input(str(root), MANIFEST)))
    assert first.files[shard].state == "mismatch" and first.files[shard].ident is not None
    rename_in(root, shard, FILES[shard])  # the copy, done already

    parsed = parse_model_check(answer(follow(root, files=[m for m in MANIFEST if m[0] == shard], before=first)))

    assert parsed.complete  # answered though its deadline is far off: the file found at start was the copy
    # without the first check's word, the file found at start is taken for the old one: it waits on
    waiting = follow(root, files=[m for m in MANIFEST if m[0] == shard])
    assert still_waiting(waiting)
