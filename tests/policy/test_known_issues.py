"""known-issues: version ranges (with rc, dev and local versions) crossed with configuration."""

from __future__ import annotations

import dataclasses

import pytest

from reconciler.errors import InputError
from reconciler.policy import Violation, evaluate
from reconciler.policy.rules.known_issues import parse_version
from reconciler.spec.load import DesiredState
from reconciler.spec.model import MoE
from reconciler.spec.policyfiles import KnownIssue, KnownIssuesFile

from .builders import host, lane, mla, model, only_rules, repo_policies, state

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


def test_dcp_on_the_r39_fork_is_denied() -> None:
    [v] = issues(glm(dcp=2))
    assert v.detail["issue"] == "vllm-r39-dcp-refused"
    assert issues(glm(engine_version="0.32.0", dcp=2)) == []


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
