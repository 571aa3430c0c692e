"""Policy files that cannot be used are input errors naming the file and the field."""

from __future__ import annotations

import dataclasses

import pytest

from reconciler.errors import InputError
from reconciler.policy import evaluate
from reconciler.spec.load import PolicySet
from reconciler.spec.policyfiles import Figure, HardwareFile, RuleConfig, RulesFile

from .builders import gqa, one_lane_state, repo_policies, with_rule, without_rule

pytestmark = pytest.mark.timeout(30)

DESIRED = one_lane_state(gqa())


def error_of(policies: PolicySet) -> InputError:
    with pytest.raises(InputError) as caught:
        evaluate(DESIRED, policies)
    return caught.value


def test_unknown_rule() -> None:
    rules = dict(repo_policies().rules.rules)
    rules["memory-budgte"] = RuleConfig()
    err = error_of(dataclasses.replace(repo_policies(), rules=RulesFile(rules=rules)))
    assert (err.file, err.field) == ("policies/rules.yaml", "rules.memory-budgte")
    assert "unknown rule" in err.message


def test_missing_required_param() -> None:
    err = error_of(with_rule(repo_policies(), "memory-budget", params={"headroom_warn_gib": None}))
    assert (err.file, err.field) == ("policies/rules.yaml", "rules.memory-budget.params.headroom_warn_gib")


def test_unknown_param() -> None:
    err = error_of(with_rule(repo_policies(), "topology", params={"strict": True}))
    assert err.field == "rules.topology.params.strict"


def test_param_of_the_wrong_kind() -> None:
    err = error_of(with_rule(repo_policies(), "memory-budget", params={"headroom_warn_gib": "ten"}))
    assert err.field == "rules.memory-budget.params.headroom_warn_gib"
    assert "must be a number" in err.message


def test_dtype_table_must_cover_every_kv_dtype() -> None:
    table = dict(repo_policies().rules.rules["memory-budget"].params["kv_dtype_bytes"])  # type: ignore[arg-type]
    del table["fp8_e5m2"]
    err = error_of(with_rule(repo_policies(), "memory-budget", params={"kv_dtype_bytes": table}))
    assert err.field == "rules.memory-budget.params.kv_dtype_bytes"
    assert "fp8_e5m2" in err.message


def test_overhead_table_must_cover_every_engine() -> None:
    err = error_of(with_rule(repo_policies(), "memory-budget", params={"overhead_gib": {"vllm": 4.0}}))
    assert "sglang" in err.message


def test_bad_regex() -> None:
    err = error_of(with_rule(repo_policies(), "secrets-by-name", params={"value_patterns": ["(unclosed"]}))
    assert err.field == "rules.secrets-by-name.params.value_patterns[0]"


def test_bad_sharing_capacity() -> None:
    err = error_of(with_rule(repo_policies(), "host-sharing", params={"capacity": "everything"}))
    assert err.field == "rules.host-sharing.params.capacity"


def test_unknown_hardware_unit() -> None:
    policies = repo_policies()
    gb10 = policies.hardware.profiles["gb10"]
    bad = gb10.model_copy(update={"torch_visible": Figure(value=121.7, unit="gibibytes", source="x")})
    err = error_of(dataclasses.replace(policies, hardware=HardwareFile(profiles={"gb10": bad})))
    assert (err.file, err.field) == ("policies/hardware.yaml", "profiles.gb10.torch_visible.unit")


def test_a_rule_left_out_does_not_run_and_says_so() -> None:
    verdict = evaluate(one_lane_state(gqa(), image="repo:tag"), without_rule(repo_policies(), "image-digest"))
    assert verdict.ok
    [note] = [v for v in verdict.violations if v.rule == "policy-config"]
    assert note.severity == "warn"
    assert note.detail["missing_rule"] == "image-digest"


def test_a_disabled_rule_does_not_run_quietly() -> None:
    verdict = evaluate(
        one_lane_state(gqa(), image="repo:tag"), with_rule(repo_policies(), "image-digest", enabled=False)
    )
    assert verdict.violations == ()


def test_repo_rules_cover_every_known_rule() -> None:
    from reconciler.policy.config import RULE_PARAMS

    assert set(repo_policies().rules.rules) == set(RULE_PARAMS)
