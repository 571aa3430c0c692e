"""`known-issues`: engine versions crossed with lane configuration.

Upstream bugs that corrupt output or refuse to start are known by what
decides them: a version range where a release fixed them, and the lane's
configuration (its flags, env, model, hardware; see `issue_match`). Each
entry of `policies/known-issues.yaml` is matched against every lane of its
engine. An entry whose limit is a kernel missing on the hardware rather than
a release leaves `versions` empty, and then holds for every build.

Versions are PEP 440, matched with pre-releases allowed: forks and nightly
builds are rc/dev/local versions (0.26.1rc0+glm53.r39.vllm9e5d1793) and
must be caught by '<0.32.0'. A version that does not parse, or the 0.0.0
that setuptools-scm writes for a build from a checkout without tags
(sglang 0.0.0.dev1+gda64c5cbb), cannot be placed in a range: when the rest
of an entry matches, the lane gets a warning that it could not be checked.

A build from a git head (`+g<sha>` in its version) against an entry that
names its `fixed_in_commit` is judged by ancestry instead (see
`issue_judgement`): the version range alone would flag a main build that
already has the fix, and wave through a dev build of the fixed release that
does not.
"""

from __future__ import annotations

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from reconciler.errors import InputError
from reconciler.policy.ancestry import build_commit
from reconciler.policy.config import RuleSettings
from reconciler.policy.context import Context
from reconciler.policy.rules.issue_judgement import judge
from reconciler.policy.rules.issue_match import conditions_hold
from reconciler.spec.policyfiles import KnownIssue

ISSUES_PATH = "policies/known-issues.yaml"


def parse_version(text: str) -> Version | None:
    """The engine version, or None when it cannot be placed in a range."""
    try:
        version = Version(text)
    except InvalidVersion:
        return None
    if not any(version.release):
        return None
    return version


def _specifiers(issues: tuple[KnownIssue, ...]) -> list[SpecifierSet]:
    out = []
    for index, issue in enumerate(issues):
        try:
            out.append(SpecifierSet(issue.versions))
        except InvalidSpecifier:
            raise InputError(
                f"'{issue.versions}' is not a PEP 440 version specifier",
                file=ISSUES_PATH,
                field=f"issues[{index}].versions",
            ) from None
    return out


def check_known_issues(ctx: Context, rule: RuleSettings) -> None:
    issues = ctx.known_issues.issues
    specs = _specifiers(issues)
    by_engine: dict[str, list[int]] = {}
    for index, issue in enumerate(issues):
        by_engine.setdefault(issue.engine, []).append(index)
    for lane in ctx.desired.lanes.values():
        indexes = by_engine.get(lane.engine)
        if not indexes:
            continue
        model = ctx.desired.models.get(lane.model)
        version = parse_version(lane.engine_version)
        build = build_commit(lane.engine_version)
        for index in indexes:
            issue = issues[index]
            if not conditions_hold(issue.when, lane, model, ctx):
                continue
            found = judge(issue, specs[index], lane, version, build, ctx.fix_ancestry)
            if found is not None:
                ctx.report(rule, severity=found.severity, lane=lane, message=found.message, detail=found.detail)
