"""The daemon's verdict on a commit, written where every clone can read it: a git note.

`git log --notes=lanes` on any clone then shows what happened to each commit
(applied, denied by which rule, failed, rolled back) without access to the
control node's journal. A note holds one entry per verdict: human-readable
`lanes: ...` lines followed by one JSON line that tools parse back
(`parse_note`). Entries are separated by a blank line, so two notes for the
same commit written on different machines merge by keeping both entries.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pygit2

NOTES_REF = "refs/notes/lanes"
NOTE_MARKER = "lanes_note"
"""Key that marks a JSON line as ours, so a person's free text is never mistaken for a verdict."""

_VERBS = {"rolled-back": "rolled back", "noop": "unchanged", "verified": "verified (seen ready)"}


def verdict_lines(verdict: Mapping[str, Any]) -> list[str]:
    """The human-readable lines of one verdict.

    `verdict` is `{"commit": sha, "refused": reason | None, "lanes": [{"lane",
    "result", "health", "error", "rule", "held_until", "timings": {"total": s}}]}`;
    every key is optional so the daemon can record what it knows. `held_until`
    (ISO 8601, UTC) marks a change a change window holds.
    """
    lines: list[str] = []
    commit = str(verdict.get("commit") or "")
    if verdict.get("refused"):
        lines.append(f"lanes: refused {commit[:12] or 'commit'}: {verdict['refused']}")
    for entry in verdict.get("lanes") or ():
        lane = entry.get("lane", "?")
        result = str(entry.get("result", "unknown"))
        verb = _VERBS.get(result, result)
        error = entry.get("error")
        rule = entry.get("rule")
        timings = entry.get("timings") or {}
        if result == "applied":
            health = entry.get("health") or "healthy"
            total = timings.get("total")
            tail = f"{health} in {float(total):.1f} s" if total is not None else str(health)
            lines.append(f"lanes: applied {lane}: {tail}")
        elif result == "blocked" and entry.get("held_until"):
            lines.append(f"lanes: held {lane} until {entry['held_until']} (change window): {error or 'waiting'}")
        elif result == "denied":
            why = f"{rule}: {error}" if rule and error else (rule or error or "denied by policy")
            lines.append(f"lanes: denied {lane}: {why}")
        elif error:
            lines.append(f"lanes: {verb} {lane}: {error}")
        else:
            lines.append(f"lanes: {verb} {lane}")
    if verdict.get("summary"):
        lines.append(f"lanes: {verdict['summary']}")
    if not lines:
        lines.append(f"lanes: nothing to do at {commit[:12] or 'this commit'}")
    return [line.replace("\n", " ") for line in lines]


def format_entry(sha: str, verdict: Mapping[str, Any]) -> str:
    """One note entry: the human lines, then the verdict as one JSON line."""
    data = {**verdict, "commit": verdict.get("commit") or sha, NOTE_MARKER: 1}
    lines = verdict_lines(data)
    return "\n".join([*lines, json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)])


def _signature(name: str, email: str) -> pygit2.Signature:
    return pygit2.Signature(name, email)


def read_note(repo: pygit2.Repository, sha: str, ref: str = NOTES_REF) -> str | None:
    """The note text on `sha` under `ref`, or None when there is none (or no notes ref yet)."""
    try:
        return repo.lookup_note(sha, ref).message
    except (KeyError, pygit2.GitError):
        return None


def _entries(text: str) -> list[str]:
    return [block.strip("\n") for block in text.strip("\n").split("\n\n") if block.strip()]


def merge_note_texts(ours: str, theirs: str) -> str:
    """Both sides' entries, ours first, each once: nothing either side recorded is lost."""
    merged = _entries(ours)
    merged += [entry for entry in _entries(theirs) if entry not in merged]
    return "\n\n".join(merged) + "\n"


def write_verdict_note(
    repo: pygit2.Repository,
    sha: str,
    verdict: Mapping[str, Any],
    *,
    author_name: str = "lanes",
    author_email: str = "lanes@localhost",
    ref: str = NOTES_REF,
) -> str:
    """Write the verdict on `sha` as a note, appending to an existing note; returns the note text.

    Writing the same verdict twice (a daemon restarted after writing it) leaves
    the note as it was, so the history does not fill with repeats.
    """
    entry = format_entry(sha, verdict)
    existing = read_note(repo, sha, ref)
    if existing is not None and entry in _entries(existing):
        return existing
    text = merge_note_texts(existing, entry) if existing else entry + "\n"
    sig = _signature(author_name, author_email)
    repo.create_note(text, sig, sig, sha, ref, True)
    return text


def parse_note(text: str | None) -> list[dict[str, Any]]:
    """The verdicts recorded in a note, oldest first; free text around them is skipped."""
    out: list[dict[str, Any]] = []
    for line in (text or "").splitlines():
        stripped = line.strip()
        if not stripped.startswith("{"):
            continue
        try:
            data = json.loads(stripped)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get(NOTE_MARKER):
            out.append(data)
    return out


def merge_notes(
    repo: pygit2.Repository,
    theirs_ref: str,
    ref: str = NOTES_REF,
    *,
    author_name: str = "lanes",
    author_email: str = "lanes@localhost",
) -> bool:
    """Fold the notes at `theirs_ref` (fetched from the remote) into `ref`; True when `ref` moved.

    Notes on different commits never conflict; a commit noted on both sides
    keeps both texts. The result is a merge commit whose parents are both tips,
    so pushing it to the remote is a fast-forward.
    """
    theirs = repo.references.get(theirs_ref)
    if theirs is None:
        return False
    their_tip = theirs.target
    ours = repo.references.get(ref)
    if ours is None:
        repo.references.create(ref, their_tip)
        return True
    our_tip = ours.target
    if our_tip == their_tip or repo.descendant_of(our_tip, their_tip):
        return False
    if repo.descendant_of(their_tip, our_tip):
        ours.set_target(their_tip)
        return True
    sig = _signature(author_name, author_email)
    # The stub omits the ref argument of Repository.notes; libgit2 takes it.
    for note in list(repo.notes(theirs_ref)):  # type: ignore[call-arg]
        annotated = str(note.annotated_id)
        text = note.message
        mine = read_note(repo, annotated, ref)
        merged = text if mine is None else merge_note_texts(mine, text)
        if merged != mine:
            repo.create_note(merged, sig, sig, annotated, ref, True)
    tip = repo.references[ref].target
    tip_commit = repo[tip]
    assert isinstance(tip_commit, pygit2.Commit)
    merge = repo.create_commit(None, sig, sig, "Notes merged by lanes\n", tip_commit.tree_id, [tip, their_tip])
    repo.references[ref].set_target(merge)
    return True
