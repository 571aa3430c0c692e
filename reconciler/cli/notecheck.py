"""Does the verdict note on a commit say what the daemon's journal says?

Notes travel with the repository and anyone with push access can push `refs/notes/lanes`; the journal
(sqlite, on the control node) is written by the daemon alone. The daemon never adopts a pushed notes
ref any more (source.notes), but a clone may still hold one, and an older forge may still show one:
`lanes history` with the journal at hand says where the two disagree instead of showing the note as
the daemon's word.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from reconciler.source.notes import parse_note


def read_decisions(db: Path) -> dict[str, str] | None:
    """commit -> the daemon's recorded outcome, from the journal opened read-only; None when unreadable."""
    if not db.is_file():
        return None
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return None
    try:
        rows = conn.execute("select sha, outcome from commits").fetchall()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return {str(sha): str(outcome) for sha, outcome in rows}


def disagreement(commit: str, note: str | None, decisions: dict[str, str]) -> str | None:
    """Why the note on `commit` is not the journal's word, or None when they agree (or there is no note).

    The journal keeps the newest decision on a commit; the note's newest verdict must say the same.
    """
    if not (note or "").strip():
        return None
    verdicts = parse_note(note)
    recorded = decisions.get(commit)
    if not verdicts:
        return f"the note holds no verdict of the daemon; its journal says {recorded or 'nothing of this commit'}"
    said = verdicts[-1].get("outcome")
    if recorded is None:
        return f"the note says {said or 'a verdict'} but the daemon's journal has no decision on this commit"
    if said != recorded:
        return f"the note says {said or 'a verdict without an outcome'} but the daemon's journal says {recorded}"
    return None
