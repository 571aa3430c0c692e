"""The daemon's verdict on a commit, written where every clone can read it: a git note.

`git log --notes=lanes` on any clone then shows what happened to each commit
(applied, denied by which rule, failed, rolled back) without access to the
control node's journal. A note holds one entry per verdict: human-readable
`lanes: ...` lines followed by one JSON line that tools parse back
(`parse_note`). Entries are separated by a blank line.

The notes ref is the daemon's own record, never a shared one: anyone who can
push can push `refs/notes/lanes` too, and a pushed "applied" on a refused
commit once became the daemon's own note by fast-forward. So the daemon never
takes a note text from the remote: when the remote's notes tip is not one it
wrote, it records a merge whose parents are both tips (its push stays a
fast-forward, the forge's history is kept) and whose tree is its own notes
alone. With signing on, every notes commit the daemon makes is SSH-signed
with its evidence key, so `git verify-commit refs/notes/lanes` against the
allowed signers tells the daemon's notes from a pushed tip.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pygit2

from reconciler.source.signatures import ssh_sign

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
            if timings.get("watch_requests") is not None:
                # Blue/green: promoted, with the figures of the watch window that decided it.
                seen, failed = int(timings["watch_requests"]), int(timings.get("watch_failures") or 0)
                tail += f"; promoted after its watch window ({seen} requests, {failed} failed)"
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
    """Both texts' entries, ours first, each once (a verdict appended to the note already on a commit)."""
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
    signing_key: Path | None = None,
) -> str:
    """Write the verdict on `sha` as a note, appending to an existing note; returns the note text.

    Writing the same verdict twice (a daemon restarted after writing it) leaves
    the note as it was, so the history does not fill with repeats. With
    `signing_key`, the notes commit is SSH-signed (as the evidence commits are).
    """
    entry = format_entry(sha, verdict)
    existing = read_note(repo, sha, ref)
    if existing is not None and entry in _entries(existing):
        return existing
    text = merge_note_texts(existing, entry) if existing else entry + "\n"
    sig = _signature(author_name, author_email)
    repo.create_note(text, sig, sig, sha, ref, True)
    if signing_key is not None:
        _sign_tip(repo, ref, signing_key)
    return text


def _commit(repo: pygit2.Repository, oid: pygit2.Oid | str) -> pygit2.Commit:
    commit = repo[oid]
    assert isinstance(commit, pygit2.Commit)
    return commit


def _sign_tip(repo: pygit2.Repository, ref: str, key: Path) -> None:
    """Replace the ref's tip by the same commit (tree, parents, message) carrying the daemon's signature."""
    tip = _commit(repo, repo.references[ref].target)
    # The stub says Oid; libgit2 returns the commit object's text, which is what gets signed.
    content = str(
        repo.create_commit_string(
            tip.author, tip.committer, tip.message, tip.tree_id, list[pygit2.Oid | str](tip.parent_ids)
        )
    )
    signature = ssh_sign(key, content.encode()).decode()
    repo.references[ref].set_target(repo.create_commit_with_signature(content, signature))


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
    signing_key: Path | None = None,
) -> bool:
    """Make `ref` a descendant of the remote's notes tip (`theirs_ref`) without taking any of its texts.

    True when `ref` moved. The daemon's notes are its own record: a remote tip it did not write (pushed
    by anyone with push access) is never adopted, neither by fast-forward nor by merging its texts.
    When the remote's tip is not already in our history, the result is a commit whose parents are our
    tip and theirs (so our push is a fast-forward and the forge's history is kept) and whose tree is
    ours alone. Before the daemon wrote its first note there is nothing of ours to keep: no ref is made.
    """
    theirs = repo.references.get(theirs_ref)
    ours = repo.references.get(ref)
    if theirs is None or ours is None:
        return False
    their_tip, our_tip = theirs.target, ours.target
    if our_tip == their_tip or repo.descendant_of(our_tip, their_tip):
        return False
    sig = _signature(author_name, author_email)
    tree = _commit(repo, our_tip).tree_id
    message = "Notes of lanes: the remote's notes tip kept as a parent, none of its texts taken\n"
    if signing_key is None:
        merge = repo.create_commit(None, sig, sig, message, tree, [our_tip, their_tip])
    else:
        content = str(repo.create_commit_string(sig, sig, message, tree, [our_tip, their_tip]))
        merge = repo.create_commit_with_signature(content, ssh_sign(signing_key, content.encode()).decode())
    ours.set_target(merge)
    return True
