"""Reading what a lane page shows: git history and evidence from the repository, decisions from the journal.

Split by where it may run: the git half reads objects only (the daemon calls it
in a thread, under the mirror's lock), the journal half uses the daemon's own
sqlite connection (its thread).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pygit2
import structlog

from reconciler.bench.evidence import loads
from reconciler.errors import InputError
from reconciler.facts.enginelog import engine_words
from reconciler.logsetup import redact
from reconciler.source.history import LaneChange, WalkStoppedError, lane_history
from reconciler.store.journal import Store

log = structlog.get_logger("lanes.dashboard")
EVIDENCE_DIR = "evidence"  # where `bench.evidence.evidence_path` puts them
HISTORY_LIMIT = 50
MAX_COMMITS_WALKED = 5000
"""How far back a lane page looks for the lane's changes: `lanes history` goes further."""
MAX_EVIDENCE_FILES = 200
MAX_EVIDENCE_BYTES = 1 << 20
"""An evidence file is a few KB; anyone who can push can add one, so a bigger one is skipped unread."""


def _clean(value: Any) -> Any:
    """Every string of an evidence file redacted (its SVG chart escapes, which would hide a secret from `e()`)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def lane_evidence(repo: pygit2.Repository, head: str, lane: str) -> list[tuple[str, dict[str, Any]]]:
    """(path, evidence) of `evidence/<lane>/*.json` at `head`, oldest first (the names sort by time)."""
    try:
        tree = repo.revparse_single(head).peel(pygit2.Tree)
        folder = tree[f"{EVIDENCE_DIR}/{lane}"]
    except (KeyError, ValueError):
        return []
    sub = repo[folder.id]
    if not isinstance(sub, pygit2.Tree):
        return []
    out = []
    for entry in sorted(sub, key=lambda x: x.name or "")[-MAX_EVIDENCE_FILES:]:
        blob = repo[entry.id]
        if not isinstance(blob, pygit2.Blob) or not (entry.name or "").endswith(".json"):
            continue
        path = f"{EVIDENCE_DIR}/{lane}/{entry.name}"
        if blob.size > MAX_EVIDENCE_BYTES:
            log.warning("dashboard.evidence_too_large", path=path, bytes=blob.size, limit=MAX_EVIDENCE_BYTES)
            continue
        try:
            out.append((path, _clean(loads(blob.data, path))))
        except InputError as exc:
            log.warning("dashboard.evidence_unreadable", path=path, error=str(exc))
    return out


def lane_git(
    repo: pygit2.Repository, head: str, lane: str, state_dir: str, stop: Callable[[], bool] | None = None
) -> tuple[list[LaneChange], list[tuple[str, dict[str, Any]]]]:
    """The lane's changes (newest first, as `lanes history` lists them) and its evidence at `head`.

    `stop` ends the work early (WalkStoppedError) once the page's request is over.
    """
    if stop is not None and stop():
        raise WalkStoppedError("stopped before the history walk")
    changes = lane_history(
        repo, lane, rev=head, state_dir=state_dir, limit=HISTORY_LIMIT, stop=stop, max_commits=MAX_COMMITS_WALKED
    )
    return changes, lane_evidence(repo, head, lane)


def lane_journal(
    store: Store, lane: str, commits: Iterable[str], limit: int = 500
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, Any]]]:
    """commit -> the lane's apply rows (oldest first), and commit -> the daemon's decision, for `commits`."""
    wanted = set(commits)
    applies: dict[str, list[dict[str, Any]]] = {}
    for row in reversed(store.applies(lane, limit=limit)):
        if row["commit"] in wanted:
            applies.setdefault(row["commit"], []).append(_decoded(row))
    decisions = {sha: d for sha in sorted(wanted) if (d := store.commit_outcome(sha)) is not None}
    return applies, decisions


def _decoded(row: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(row)
    try:
        out["timings"] = json.loads(out.get("timings") or "{}")
    except ValueError:
        out["timings"] = {}
    # Container log tails stay in the journal (`lanes logs` reads live ones); their error lines come along.
    try:
        logs = json.loads(out.pop("logs", None) or "{}")
    except ValueError:
        logs = {}
    out["engine_error"] = engine_words(logs) if isinstance(logs, dict) else None
    return out
