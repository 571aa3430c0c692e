"""Is one lane's engine build affected by one known issue? Its version, and for git builds its commit.

By version alone (PEP 440, pre-releases allowed): in the range is affected,
outside is not, a version that cannot be placed (unparsable, or the 0.0.0 of
a build from a checkout without tags) is a warning that it could not be
checked. An empty range (an entry not bounded by any release) holds for every
build, whatever its version says.

A build that names its commit (`+g<sha>`) against an entry that names its
`fixed_in_commit` is a question of ancestry, because its version only says
roughly where the build sits:

- PEP 440 keeps pre-releases of V out of `<V` (packaging's `_compare_less_than`:
  "a pre-release of the specified version" is not less than it), so
  `0.32.0rc1.dev123+g<sha>` passes `<0.32.0` whether or not the fix is in it.
  For these builds the range is read by plain ordering (the build sorts
  before 0.32.0), and ancestry decides.
- `0.31.1rc1.dev200+g<sha>`, a main build after 0.31, is in `<0.32.0` but may
  already carry the fix; ancestry decides.
- `0.0.0.dev1+g<sha>` cannot be placed at all; ancestry decides.

Fix in the build: no finding. Fix not in it: the entry's severity. No answer
(no mirror, a commit the mirror lacks): in range by PEP 440 keeps the entry's
severity, otherwise a warning; either way the finding says why ancestry
could not be checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from reconciler.policy.ancestry import FixAncestry, FixQuestion, answer
from reconciler.policy.verdict import DetailValue, Severity
from reconciler.spec.lane import Lane
from reconciler.spec.policyfiles import KnownIssue

Placement = Literal["in", "pre-release of the bound", "unplaced", "out"]


@dataclass(frozen=True)
class Finding:
    severity: Severity
    message: str
    detail: dict[str, DetailValue]


def placement(spec: SpecifierSet, version: Version | None) -> Placement:
    """Where a version sits against a range, with pre-releases of an exclusive upper bound told apart.

    An empty range is every version: the entry's limit is not a release, so
    even a build whose version cannot be read is in it.
    """
    if not spec:
        return "in"
    if version is None:
        return "unplaced"
    if spec.contains(version, prereleases=True):
        return "in"
    ordered = all(
        version < Version(s.version) if s.operator == "<" else s.contains(version, prereleases=True) for s in spec
    )
    return "pre-release of the bound" if ordered else "out"


def judge(
    issue: KnownIssue,
    spec: SpecifierSet,
    lane: Lane,
    version: Version | None,
    build: str | None,
    ancestry: FixAncestry,
) -> Finding | None:
    """The finding for a lane whose configuration matches the issue, or None when it is not affected."""
    where = placement(spec, version)
    detail: dict[str, DetailValue] = {
        "issue": issue.id,
        "ref": issue.ref,
        "engine_version": lane.engine_version,
        "versions": issue.versions,
        "checkable": where != "unplaced",
    }
    if issue.fixed_in is not None:
        detail["fixed_in"] = issue.fixed_in
    about = f"{issue.id} ({lane.engine} {issue.versions}: {issue.summary}; {issue.ref})"
    affected = f"{lane.engine} {lane.engine_version} is affected by {issue.id}: {issue.summary} ({issue.ref})"
    unplaced = f"engine_version '{lane.engine_version}' cannot be placed in a version range"
    if issue.fixed_in_commit is None or issue.repo is None or build is None:
        if where == "in":
            return Finding(issue.severity, f"{affected}; {issue.action}", detail)
        if where == "unplaced":
            message = f"{unplaced}, so known issue {about} cannot be ruled out; write the engine's real version"
            return Finding("warn", message, detail)
        return None
    if where == "out":
        return None
    fix = issue.fixed_in_commit
    reply = answer(ancestry, FixQuestion(issue.repo, fix, build))
    detail.update(fixed_in_commit=fix, build_commit=build, ancestry_how=reply.how)
    detail["ancestry"] = {True: "contains-fix", False: "lacks-fix", None: "unknown"}[reply.contains_fix]
    if reply.contains_fix:
        return None
    if reply.contains_fix is False:
        detail["checkable"] = True
        lacks = f"its commit {build} does not contain the fix {fix[:12]} ({reply.how})"
        return Finding(issue.severity, f"{affected}; {lacks}; {issue.action}", detail)
    unknown = f"whether commit {build} contains the fix {fix[:12]} of {issue.repo} could not be checked: {reply.how}"
    if where == "in":
        return Finding(issue.severity, f"{affected}; {unknown}; {issue.action}", detail)
    if where == "pre-release of the bound":
        message = (
            f"{lane.engine} {lane.engine_version} is a pre-release of a version {issue.versions} leaves out, "
            f"so known issue {about} depends on whether its build has the fix, and {unknown}"
        )
        return Finding("warn", message, detail)
    return Finding("warn", f"{unplaced}, and {unknown}; known issue {about} cannot be ruled out", detail)
