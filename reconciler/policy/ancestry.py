"""Does an engine build contain an upstream fix? The questions the known-issues rule asks of git.

A version range cannot say it for a build from a git head. vLLM versions its
builds with setuptools-scm (vllm-project/vllm setup.py, `get_vllm_version`:
`get_version(write_to="vllm/_version.py")`, then the device appended to the
local segment, `+cu130` or `.cu130` when a `+` is there already): between
tags the default `guess-next-dev` scheme writes the next version with a dev
number and the default `node-and-date` local scheme the commit, so a main
build reads `0.16.1rc1.dev268+ge2b31243c` (as reported in docker/model-runner
#735), dirty trees add `.d<date>`. In PEP 440 that build sorts before 0.16.1
whether or not a given fix is in it, and forks add local segments of their
own. What answers it is ancestry: the fix commit is an ancestor of (or is)
the build's commit.

The policy layer does no I/O, so the rule only asks: `fix_questions` lists,
per lane build that names its commit and per known issue that names its fix
commit, the (repository, fix, build) triple; whoever evaluates a commit may
answer them from the git mirrors it keeps (`reconciler.upstream.ancestry`)
and pass the answers to `evaluate`. A question nobody answered is answered
"not checked", and the rule says so rather than guessing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from reconciler.spec.load import DesiredState
from reconciler.spec.policyfiles import KnownIssuesFile

# setuptools-scm's node-and-date local scheme: `g` + the abbreviated commit (git's --abbrev, 7+ hex digits).
_COMMIT_PART = re.compile(r"^g([0-9a-f]{7,40})$")
NOT_ASKED = "no git mirror of the repository was consulted by this evaluation"


@dataclass(frozen=True)
class FixQuestion:
    """Is commit `fix` of repository `repo` an ancestor of (or the same as) commit `build`?"""

    repo: str
    """As the known issue names it: owner/name on GitHub, or a git URL."""
    fix: str
    build: str
    """As the build's version names it: an abbreviated sha, at least 7 hex digits."""


@dataclass(frozen=True)
class FixAnswer:
    contains_fix: bool | None
    """None: it could not be told (`how` says why)."""
    how: str
    """Where the answer came from, or why there is none; shown in the finding."""


FixAncestry = Mapping[FixQuestion, FixAnswer]


def build_commit(engine_version: str) -> str | None:
    """The commit a build names in its local segment (`0.32.1.dev0+g8244d1c44.cu130` -> `8244d1c44`)."""
    try:
        local = Version(engine_version.strip()).local
    except InvalidVersion:
        return None
    for part in (local or "").split("."):
        match = _COMMIT_PART.match(part)
        if match:
            return match.group(1)
    return None


def fix_questions(desired: DesiredState, known: KnownIssuesFile) -> list[FixQuestion]:
    """Every question the known-issues rule would ask of this desired state, in a stable order."""
    asked: set[FixQuestion] = set()
    for lane in desired.lanes.values():
        build = build_commit(lane.engine_version)
        if build is None:
            continue
        for issue in known.issues:
            if issue.engine == lane.engine and issue.fixed_in_commit is not None and issue.repo is not None:
                asked.add(FixQuestion(issue.repo, issue.fixed_in_commit, build))
    return sorted(asked, key=lambda q: (q.repo, q.fix, q.build))


def answer(ancestry: FixAncestry, question: FixQuestion) -> FixAnswer:
    return ancestry.get(question) or FixAnswer(None, NOT_ASKED)
