"""known-issues: version ranges (with rc, dev and local versions) crossed with configuration."""

from __future__ import annotations

import dataclasses

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from reconciler.errors import InputError
from reconciler.policy import Violation, evaluate
from reconciler.policy.ancestry import NOT_ASKED, FixAnswer, FixQuestion, build_commit, fix_questions
from reconciler.policy.rules.issue_judgement import placement
from reconciler.policy.rules.known_issues import parse_version
from reconciler.spec.load import DesiredState, PolicySet, load_policies
from reconciler.spec.model import MoE
from reconciler.spec.policyfiles import KnownIssue, KnownIssuesFile

from .builders import host, lane, mla, model, only_rules, repo_files, repo_policies, state

pytestmark = pytest.mark.timeout(30)

POLICIES = only_rules(repo_policies(), "known-issues")
R39 = "0.26.1rc0+glm53.r39.vllm9e5d1793"


def glm(engine_version: str = R39, quantization: str = "mxfp4", **fields: object) -> DesiredState:
    hosts = [f"h{i}" for i in range(4)]
    glm_model = model(
        "glm", arch=mla(num_heads=64), quantization=quantization, moe=MoE(experts=256, experts_per_token=8)
    )
    fields.setdefault("tp", 4)
    return state(
        [host(h) for h in hosts],
        [glm_model],
        [lane("glm", "glm", hosts, engine_version=engine_version, **fields)],
    )


def issues(desired: DesiredState) -> list[Violation]:
    return [v for v in evaluate(desired, POLICIES).violations if v.rule == "known-issues"]


def test_moe_under_ep_on_old_vllm_is_denied() -> None:
    [v] = issues(glm(ep=4))
    assert v.severity == "deny"
    assert v.detail["issue"] == "vllm-59042-moe-ep-corruption"
    assert "vllm-project/vllm#59042" in v.message
    assert "set ep to 1" in v.message


def test_no_ep_passes() -> None:
    assert issues(glm(ep=1)) == []


def test_fixed_vllm_passes() -> None:
    assert issues(glm(engine_version="0.32.0", ep=4)) == []
    assert issues(glm(engine_version="0.32.1.dev0+g8244d1c44", ep=4)) == []


def test_bf16_weights_are_not_affected() -> None:
    assert issues(glm(quantization="fp8", ep=4)) == []


def test_nvfp4_kv_on_old_vllm_is_denied() -> None:
    [v] = issues(glm(kv_cache_dtype="nvfp4"))
    assert v.detail["issue"] == "vllm-46963-nvfp4-kv-sm12x"


def test_dcp_is_judged_by_the_attention_backend_not_the_version() -> None:
    # This GLM has no indexer (dense MLA): on SM12x vLLM gives it TRITON_MLA, which returns the
    # decode LSE DCP needs, so no release refuses it; only the drift warning applies.
    # The sparse-MLA refusal is in test_known_issues_gb10.
    for version in (R39, "0.32.0"):
        [v] = issues(glm(engine_version=version, dcp=2))
        assert (v.detail["issue"], v.severity) == ("vllm-41623-dcp-output-drift", "warn")


def test_unparsable_version_warns_it_cannot_be_checked() -> None:
    [v] = issues(glm(engine_version="nightly-20261015", ep=4))
    assert v.severity == "warn"
    assert v.detail["checkable"] is False
    assert "cannot be placed in a version range" in v.message


def test_unparsable_version_is_quiet_when_nothing_else_matches() -> None:
    assert issues(glm(engine_version="nightly-20261015", ep=1)) == []


def test_setuptools_scm_placeholder_cannot_be_checked() -> None:
    assert parse_version("0.0.0.dev1+gda64c5cbb") is None
    assert parse_version(R39) is not None
    assert parse_version("not a version") is None


def test_stopped_lane_finding_is_a_warning() -> None:
    [v] = issues(glm(ep=4, desired="stopped"))
    assert v.severity == "warn"
    assert "would be denied when started" in v.message


def test_args_condition() -> None:
    hosts = ["h0"]
    desired = state(
        [host("h0")],
        [model("m")],
        [
            lane(
                "s",
                "m",
                hosts,
                engine="sglang",
                engine_version="0.5.21",
                args=("--speculative-algorithm=DSPARK",),
            )
        ],
    )
    [v] = issues(desired)
    assert v.severity == "warn"
    assert v.detail["issue"] == "sglang-42624-dspark-uncommitted-slots"
    assert issues(dataclasses.replace(desired, lanes={"s": desired.lanes["s"].model_copy(update={"args": ()})})) == []


def test_bad_specifier_is_an_input_error() -> None:
    bad = KnownIssue(id="x", engine="vllm", versions="<<0.3", summary="s", action="a", ref="r")
    policies = dataclasses.replace(POLICIES, known_issues=KnownIssuesFile(issues=(bad,)))
    with pytest.raises(InputError) as caught:
        evaluate(glm(), policies)
    assert caught.value.file == "policies/known-issues.yaml"
    assert caught.value.field == "issues[0].versions"


# Known issues with a fix commit: builds from a git head are judged by ancestry.

FIX = "4f0c1e2d3b4a59687766554433221100ffeeddcc"
UPSTREAM = "vllm-project/vllm"
MAIN_BUILD = "0.31.1rc1.dev200+g1234abcd9"
"""A vLLM main build after 0.31: in '<0.32.0', with or without the fix (shape: docker/model-runner#735)."""
DEV_OF_FIX = "0.32.0rc1.dev123+g1234abcd9"
"""A dev build of 0.32.0: PEP 440 keeps it out of '<0.32.0', with or without the fix."""


def with_fix(policies: PolicySet = POLICIES) -> PolicySet:
    """The repository's policies with the MoE/EP corruption entry naming its (test) fix commit."""
    issues = tuple(
        i.model_copy(update={"fixed_in_commit": FIX, "repo": UPSTREAM}) if i.id == "vllm-59042-moe-ep-corruption" else i
        for i in policies.known_issues.issues
    )
    return dataclasses.replace(policies, known_issues=KnownIssuesFile(issues=issues))


def judged(engine_version: str, contains: bool | None = None, how: str = "mirror of vllm-main") -> list[Violation]:
    ancestry = {} if contains is None else {FixQuestion(UPSTREAM, FIX, "1234abcd9"): FixAnswer(contains, how)}
    verdict = evaluate(glm(engine_version=engine_version, ep=4), with_fix(), fix_ancestry=ancestry)
    return [v for v in verdict.violations if v.rule == "known-issues"]


def test_the_commit_a_build_names_is_read_from_its_local_segment() -> None:
    assert build_commit("0.16.1rc1.dev268+ge2b31243c") == "e2b31243c"  # docker/model-runner#735
    assert build_commit("0.32.1.dev0+g8244d1c44.cu130") == "8244d1c44"  # vLLM's setup.py appends .cu130
    assert build_commit("0.0.0.dev1+gda64c5cbb") == "da64c5cbb"
    assert build_commit("0.7.3.dev228+g42333026.d20250219") == "42333026"  # a dirty tree adds .d<date>
    assert build_commit(R39) is None  # a fork's own local segment names no commit
    assert build_commit("0.32.0") is None and build_commit("nightly-20261015") is None


def test_pre_releases_of_an_exclusive_bound_are_told_apart() -> None:
    below = SpecifierSet("<0.32.0")
    assert placement(below, Version(MAIN_BUILD)) == "in"
    assert placement(below, Version(DEV_OF_FIX)) == "pre-release of the bound"
    assert placement(below, Version("0.32.0")) == "out" and placement(below, Version("0.32.1.dev1+gabcdef1")) == "out"
    assert placement(SpecifierSet(">=0.30,<0.32.0"), Version("0.29.0rc1.dev3+gabcdef1")) == "out"
    assert placement(below, None) == "unplaced"


def test_a_main_build_that_contains_the_fix_is_not_flagged() -> None:
    assert judged(MAIN_BUILD, contains=True) == []


def test_a_main_build_without_the_fix_is_denied_with_the_commits_named() -> None:
    [v] = judged(MAIN_BUILD, contains=False)
    assert v.severity == "deny" and v.detail["ancestry"] == "lacks-fix"
    assert f"its commit 1234abcd9 does not contain the fix {FIX[:12]} (mirror of vllm-main)" in v.message


def test_a_dev_build_of_the_fixed_release_without_the_fix_is_denied() -> None:
    # By version alone it passes '<0.32.0'; its commit says otherwise.
    assert issues(glm(engine_version=DEV_OF_FIX, ep=4)) == []
    [v] = judged(DEV_OF_FIX, contains=False)
    assert v.severity == "deny" and v.detail["build_commit"] == "1234abcd9"
    assert judged(DEV_OF_FIX, contains=True) == []


def test_without_an_answer_the_finding_says_ancestry_was_not_checked() -> None:
    [inside] = judged(MAIN_BUILD)
    assert inside.severity == "deny" and inside.detail["ancestry"] == "unknown"
    assert f"whether commit 1234abcd9 contains the fix {FIX[:12]} of {UPSTREAM} could not be checked" in inside.message
    assert NOT_ASKED in inside.message
    [bound] = judged(DEV_OF_FIX, contains=None)
    assert bound.severity == "warn" and "is a pre-release of a version <0.32.0 leaves out" in bound.message
    [placeholder] = judged("0.0.0.dev1+g1234abcd9", contains=None)
    assert placeholder.severity == "warn" and "cannot be placed in a version range" in placeholder.message


def test_a_build_that_cannot_be_placed_is_judged_by_its_commit() -> None:
    assert judged("0.0.0.dev1+g1234abcd9", contains=True) == []
    [v] = judged("0.0.0.dev1+g1234abcd9", contains=False)
    assert v.severity == "deny" and v.detail["checkable"] is True


def test_a_fork_without_a_commit_in_its_version_is_judged_by_its_version() -> None:
    [v] = judged(R39, contains=True)  # 0.26.1rc0+glm53.r39...: no +g<sha>, no question asked
    assert v.severity == "deny" and "ancestry" not in v.detail


def test_the_rule_asks_one_question_per_build_and_fix() -> None:
    desired = glm(engine_version=MAIN_BUILD, ep=4)
    assert fix_questions(desired, with_fix().known_issues) == [FixQuestion(UPSTREAM, FIX, "1234abcd9")]
    assert fix_questions(glm(engine_version=R39), with_fix().known_issues) == []


def test_a_fix_commit_needs_its_repository_and_a_full_sha() -> None:
    files = repo_files(folders=("policies",))
    text = files["policies/known-issues.yaml"].decode()
    entry = "    ref: vllm-project/vllm#59042\n"
    assert entry in text
    for extra, field, message in (
        (f"    fixed_in_commit: {FIX}\n", "issues[0]", "fixed_in_commit needs repo"),
        ("    fixed_in_commit: 4f0c1e2\n    repo: vllm-project/vllm\n", "issues[0].fixed_in_commit", "4f0c1e2"),
    ):
        broken = {**files, "policies/known-issues.yaml": text.replace(entry, entry + extra, 1).encode()}
        with pytest.raises(InputError) as caught:
            load_policies(broken)
        assert (caught.value.file, caught.value.field) == ("policies/known-issues.yaml", field)
        assert caught.value.line is not None and message in str(caught.value)
