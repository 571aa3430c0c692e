"""Verdict notes: written, appended, merged, and visible to `git log --notes=lanes` on a clone."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from reconciler.source.mirror import Mirror
from reconciler.source.notes import (
    NOTES_REF,
    merge_note_texts,
    merge_notes,
    parse_note,
    read_note,
    verdict_lines,
    write_verdict_note,
)
from tests.source.gitutil import commit, forge_and_clone, git

pytestmark = pytest.mark.timeout(60)

PROD = "dsv41-flash-1017-4x-sglang"
GLM = "glm53-mxfp4-fp8-4x-r39"
VERDICT = {
    "lanes": [
        {"lane": PROD, "result": "applied", "health": "healthy", "timings": {"total": 4.62, "ready": 3.9}},
        {
            "lane": GLM,
            "result": "denied",
            "rule": "memory-budget",
            "error": "rank 0 on dgx1 needs 131.2 GiB > budget 97.4 GiB",
        },
    ]
}


def test_lines_say_what_happened_to_each_lane() -> None:
    lines = verdict_lines(VERDICT)
    assert lines == [
        f"lanes: applied {PROD}: healthy in 4.6 s",
        f"lanes: denied {GLM}: memory-budget: rank 0 on dgx1 needs 131.2 GiB > budget 97.4 GiB",
    ]
    assert verdict_lines({"commit": "ab" * 20, "refused": "commit abababababab is not signed"}) == [
        "lanes: refused abababababab: commit abababababab is not signed"
    ]
    assert verdict_lines({"lanes": [{"lane": "x", "result": "rolled-back", "error": "no token\nafter 5 s"}]}) == [
        "lanes: rolled back x: no token after 5 s"
    ]
    assert verdict_lines({"lanes": [{"lane": "x", "result": "stopped"}]}) == ["lanes: stopped x"]


def test_write_read_append_and_parse(tmp_path: Path) -> None:
    _, work = forge_and_clone(tmp_path)
    sha = str(work.head.target)
    assert read_note(work, sha) is None
    text = write_verdict_note(work, sha, VERDICT)
    assert read_note(work, sha) == text
    assert text.startswith(f"lanes: applied {PROD}: healthy in 4.6 s\n")
    # Same verdict again (a restarted daemon): unchanged.
    assert write_verdict_note(work, sha, VERDICT) == text
    later = {"lanes": [{"lane": PROD, "result": "rolled-back", "error": "health check failed"}]}
    appended = write_verdict_note(work, sha, later)
    assert appended.startswith(text.rstrip("\n") + "\n\n")
    verdicts = parse_note(appended)
    assert [v["lanes"][0]["result"] for v in verdicts] == ["applied", "rolled-back"]
    assert all(v["commit"] == sha for v in verdicts)
    note = work.lookup_note(sha, NOTES_REF)
    assert note.message == appended
    assert parse_note('free text\n{not json\n{"other": 1}\n') == []


def test_merge_texts_keeps_both_sides_once() -> None:
    assert merge_note_texts("a\n\nb\n", "b\n\nc\n") == "a\n\nb\n\nc\n"
    assert merge_note_texts("a\n", "a\n") == "a\n"


def test_merge_notes_keeps_the_remote_tip_as_a_parent_and_takes_none_of_its_texts(tmp_path: Path) -> None:
    _, work = forge_and_clone(tmp_path)
    first = str(work.head.target)
    second = commit(work, {"x": b"2"}, "second")
    # Nothing of ours yet: the remote's notes are not adopted as ours.
    write_verdict_note(work, first, {"summary": "pushed"}, ref="refs/notes-origin/lanes")
    assert merge_notes(work, "refs/notes-origin/lanes") is False
    assert NOTES_REF not in work.references
    write_verdict_note(work, first, {"summary": "base"})
    base = work.references[NOTES_REF].target
    # Theirs is ours plus one (someone pushed on top of the daemon's notes): not a fast-forward to theirs.
    work.references.create("refs/notes-origin/lanes", base, force=True)
    write_verdict_note(work, second, {"summary": "theirs"}, ref="refs/notes-origin/lanes")
    their_tip = work.references["refs/notes-origin/lanes"].target
    assert merge_notes(work, "refs/notes-origin/lanes") is True
    tip = work[work.references[NOTES_REF].target]
    assert isinstance(tip, pygit2.Commit)
    assert list(tip.parent_ids) == [base, their_tip]
    assert read_note(work, second) is None and "lanes: base" in (read_note(work, first) or "")
    assert merge_notes(work, "refs/notes-origin/lanes") is False  # their tip is in our history now
    # Diverged: both wrote on the same commit; only ours stays.
    write_verdict_note(work, first, {"summary": "ours again"})
    write_verdict_note(work, first, {"summary": "theirs again"}, ref="refs/notes-origin/lanes")
    assert merge_notes(work, "refs/notes-origin/lanes") is True
    text = read_note(work, first) or ""
    assert "lanes: ours again" in text and "lanes: base" in text and "theirs again" not in text
    assert merge_notes(work, "refs/notes-origin/missing") is False


def test_git_log_on_a_clone_shows_the_verdict(tmp_path: Path) -> None:
    forge, _ = forge_and_clone(tmp_path)
    mirror = Mirror(forge.path, tmp_path / "mirror.git")
    head = mirror.fetch()
    write_verdict_note(mirror.repo, head, VERDICT)
    assert mirror.push_notes()
    clone = tmp_path / "laptop"
    git("clone", "--quiet", forge.path, str(clone))
    git("fetch", "--quiet", "origin", "refs/notes/*:refs/notes/*", cwd=clone)
    out = git("log", "--notes=lanes", "-1", cwd=clone)
    print(out)
    assert "Notes (lanes):" in out
    assert f"lanes: applied {PROD}: healthy in 4.6 s" in out
    assert f"lanes: denied {GLM}: memory-budget: rank 0 on dgx1 needs 131.2 GiB" in out
    assert isinstance(pygit2.Repository(str(clone)).lookup_note(head, NOTES_REF).message, str)
