"""The evidence a daemon commits into a world's state repo, as tests wait for and read it: the evidence files
on main (a person's next commit keeps them, as a pull would), one lane's, and the first evidence commit
the daemon has decided about."""

from __future__ import annotations

import pygit2

from tests.support.waiting import wait_for
from tests.support.world import World


def evidence_files(w: World) -> dict[str, bytes]:
    """The evidence the daemon committed so far (a person's next commit keeps it, as a pull would)."""
    git = w.repo.repo
    tree = git[git.references["refs/heads/main"].target].peel(pygit2.Tree)
    out: dict[str, bytes] = {}

    def walk(t: pygit2.Tree, prefix: str) -> None:
        for entry in t:
            obj = git[entry.id]
            if isinstance(obj, pygit2.Tree):
                walk(obj, f"{prefix}{entry.name}/")
            elif isinstance(obj, pygit2.Blob):
                out[f"{prefix}{entry.name}"] = obj.data

    if "evidence" in tree:
        walk(git[tree["evidence"].id].peel(pygit2.Tree), "evidence/")
    return out


def lane_evidence(w: World, lane: str) -> list[str]:
    return [p for p in evidence_files(w) if p.startswith(f"evidence/{lane}/") and p.endswith(".json")]


def evidence_head(w: World) -> str | None:
    """The branch head when it is an evidence commit the daemon has decided about."""
    git = w.repo.repo
    head = str(git.references["refs/heads/main"].target)
    commit = git[head]
    assert isinstance(commit, pygit2.Commit)
    return head if "Evidence-For:" in commit.message and w.outcome(head) is not None else None


def evidence_on(w: World, commit: str, base: str) -> bool:
    """`commit` is `base`, or evidence commits alone lead from `base` to it (first parents)."""
    git = w.repo.repo
    at = git[commit]
    while isinstance(at, pygit2.Commit) and str(at.id) != base:
        if "Evidence-For:" not in at.message or not at.parents:
            return False
        at = at.parents[0]
    return isinstance(at, pygit2.Commit)


async def decided_evidence(w: World) -> str:
    """Waits for the daemon's first evidence commit and its decision; the commit."""
    await wait_for(lambda: evidence_head(w) is not None, 120, "an evidence commit decided by the daemon")
    head = evidence_head(w)
    assert head is not None
    return head
