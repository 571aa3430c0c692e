"""Answer the known-issues rule's ancestry questions from the git-head watch's mirrors.

The git-head watch (`githead`) keeps a bare mirror of each watched branch
under `<data_dir>/mirrors/<source>.git`, fetched with its whole history, so
"is the fix commit an ancestor of the build's commit" is a lookup there
(pygit2's `descendant_of`, git's `merge-base --is-ancestor`), no network. A
known issue names its repository as owner/name or a URL; it is matched to a
git-head source by the owner/name its URL ends in. Every question gets an
answer, and one that cannot be told says why: no source watches that
repository, its mirror was not fetched yet, or a commit is not in it (a
fork's commit, or one newer than the last fetch).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import pygit2

from reconciler.policy.ancestry import FixAnswer, FixQuestion, fix_questions
from reconciler.spec.load import DesiredState
from reconciler.spec.policyfiles import KnownIssuesFile
from reconciler.spec.upstream import GitHead, UpstreamSource
from reconciler.upstream.mirrors import mirror_path

_SCP_LIKE = re.compile(r"^[\w.-]+@[\w.-]+:")


def repo_key(text: str) -> str:
    """`owner/name` of a repository, however it is written (URL, scp-like `git@host:o/n.git`, o/n, a path)."""
    path = _SCP_LIKE.sub("", text.strip())
    path = re.sub(r"^[a-z+]+://[^/]*", "", path).rstrip("/").removesuffix(".git")
    return "/".join(path.split("/")[-2:]).lower()


def _watching(repo: str, sources: Sequence[UpstreamSource]) -> list[GitHead]:
    key = repo_key(repo)
    return [s for s in sources if isinstance(s, GitHead) and (s.url == repo or repo_key(s.url) == key)]


def _lookup(repo: pygit2.Repository, sha: str) -> pygit2.Commit | None:
    try:
        found = repo.revparse_single(sha)
    except (KeyError, ValueError, pygit2.GitError):
        return None  # absent, or an abbreviation that names more than one object
    commit = found.peel(pygit2.Commit)
    return commit if isinstance(commit, pygit2.Commit) else None


def answer_one(question: FixQuestion, sources: Sequence[UpstreamSource], data_dir: Path) -> FixAnswer:
    watching = _watching(question.repo, sources)
    if not watching:
        return FixAnswer(None, f"no git-head source in state/upstreams.yaml watches {question.repo}")
    reasons = []
    for source in watching:
        path = mirror_path(data_dir, source.name)
        if not (path / "HEAD").exists():
            reasons.append(
                f"git-head source '{source.name}' has no mirror under {data_dir} yet (lanes upstream --refresh)"
            )
            continue
        mirror = pygit2.Repository(str(path))
        fix, build = _lookup(mirror, question.fix), _lookup(mirror, question.build)
        where = f"the mirror of '{source.name}' ({source.branch})"
        if build is None:
            reasons.append(f"commit {question.build} is not in {where}: a fork's commit, or newer than its last fetch")
            continue
        if fix is None:
            reasons.append(f"the fix {question.fix[:12]} is not in {where}: not merged there, or newer than its fetch")
            continue
        contains = fix.id == build.id or mirror.descendant_of(build.id, fix.id)
        return FixAnswer(contains, f"by ancestry in {where}")
    return FixAnswer(None, "; ".join(reasons))


def answer_fix_questions(
    questions: Iterable[FixQuestion], sources: Sequence[UpstreamSource], data_dir: Path
) -> dict[FixQuestion, FixAnswer]:
    """One answer per question (blocking: libgit2 reads the mirrors; run it in a thread from async code)."""
    return {q: answer_one(q, sources, data_dir) for q in questions}


def fix_ancestry(desired: DesiredState, known: KnownIssuesFile, data_dir: Path) -> dict[FixQuestion, FixAnswer]:
    """Everything `evaluate(..., fix_ancestry=...)` can use for this desired state, from the mirrors there are."""
    return answer_fix_questions(fix_questions(desired, known), desired.upstreams.sources, data_dir)
