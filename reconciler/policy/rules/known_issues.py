"""`known-issues`: engine versions crossed with lane configuration.

Upstream bugs that corrupt output or refuse to start are known by version
range and configuration (vLLM < 0.32 with MXFP4/NVFP4 MoE under expert
parallelism silently corrupts, vLLM #59042). Each entry of
`policies/known-issues.yaml` is matched against every lane of its engine.

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
from reconciler.spec.lane import Lane
from reconciler.spec.model import ModelSpec
from reconciler.spec.policyfiles import IssueCondition, KnownIssue

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


def _conditions_hold(when: IssueCondition, lane: Lane, model: ModelSpec | None) -> bool:
    if when.quantization:
        quant = model.quantization.lower() if model is not None else ""
        if quant not in {q.lower() for q in when.quantization}:
            return False
    if when.kv_cache_dtype and lane.kv_cache_dtype not in when.kv_cache_dtype:
        return False
    if when.moe is not None and (model is None or (model.moe is not None) != when.moe):
        return False
    for floor, value in (
        (when.min_ep, lane.ep),
        (when.min_tp, lane.tp),
        (when.min_pp, lane.pp),
        (when.min_dcp, lane.dcp),
    ):
        if floor is not None and value < floor:
            return False
    if when.launcher is not None and lane.launcher != when.launcher:
        return False
    return all(any(arg == flag or arg.startswith(flag + "=") for arg in lane.args) for flag in when.args_include)


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
            if not _conditions_hold(issue.when, lane, model):
                continue
            found = judge(issue, specs[index], lane, version, build, ctx.fix_ancestry)
            if found is not None:
                ctx.report(rule, severity=found.severity, lane=lane, message=found.message, detail=found.detail)
