"""memory-budget and boot-utilization findings: when they deny, warn or stay quiet, and what they say."""

from __future__ import annotations

import pytest

from reconciler.policy import Violation, evaluate
from reconciler.spec.load import DesiredState, PolicySet

from .builders import GIB, gqa, mla, one_lane_state, only_rules, repo_policies, with_rule

pytestmark = pytest.mark.timeout(30)

POLICIES = only_rules(repo_policies(), "memory-budget", "boot-utilization")
GB10 = int(121.7 * GIB)


def findings(desired: DesiredState, policies: PolicySet = POLICIES, rule: str = "memory-budget") -> list[Violation]:
    return [v for v in evaluate(desired, policies).violations if v.rule == rule]


def test_fits_with_room_no_finding() -> None:
    desired = one_lane_state(gqa(), weight_bytes=40 * GIB, tp=2)
    assert findings(desired) == []


def test_mla_divided_by_tp_would_pass_but_whole_on_every_rank_denies() -> None:
    # MLA bf16: (512 + 64) x 2 = 1152 B per token per layer; 60 layers; 1,000,000 tokens.
    arch = mla(layers=60)
    desired = one_lane_state(arch, weight_bytes=160 * GIB, tp=4, kv_cache_dtype="bf16", max_model_len=1_000_000)
    verdict = evaluate(desired, POLICIES)
    kv = 1152 * 60 * 1_000_000
    budget = int(0.8 * GB10)
    weights, overhead = 40 * GIB, 4 * GIB
    assert weights + kv // 4 + overhead < budget  # the wrong rule (KV / tp) would let it through
    assert all(b.kv_min == kv for b in verdict.budgets)
    assert all(b.need == weights + kv + overhead > budget for b in verdict.budgets)
    denies = [v for v in verdict.violations if v.severity == "deny"]
    assert [v.rank for v in denies] == [0, 1, 2, 3]
    assert not verdict.ok
    assert verdict.denied_lanes == frozenset({"l"})
    first = denies[0]
    assert first.host == "h0"
    assert first.detail["need"] == weights + kv + overhead
    assert first.detail["budget"] == budget
    assert first.detail["kv_min"] == kv
    assert "rank 0 on h0 needs 108.4 GiB" in first.message
    assert "budget is 97.4 GiB (0.80 x 121.7 GiB)" in first.message
    # The suggestion is a max_model_len that really fits.
    fits = int(first.detail["fitting_max_model_len"])
    assert f"lower max_model_len to {fits} or less" in first.message
    assert weights + 1152 * 60 * fits + overhead <= budget < weights + 1152 * 60 * (fits + 1) + overhead


def test_weights_alone_over_budget_says_so() -> None:
    desired = one_lane_state(gqa(), weight_bytes=200 * GIB)
    [deny] = findings(desired)
    assert deny.severity == "deny"
    assert deny.detail["fitting_max_model_len"] == 0
    assert "weights and overhead alone need 204.0 GiB" in deny.message


def test_low_headroom_warns_with_numbers() -> None:
    # 0.8 x 121.7 = 97.36 GiB; weights 85 + vLLM 4 + KV ~0.04 -> headroom ~8.3 GiB < 10.
    desired = one_lane_state(gqa(), weight_bytes=85 * GIB)
    [warn] = findings(desired)
    assert warn.severity == "warn"
    assert warn.rank == 0
    assert "leaves 8.3 GiB of headroom, under the 10 GiB margin" in warn.message
    assert warn.detail["headroom"] == warn.detail["budget"] - warn.detail["need"]  # type: ignore[operator]
    assert evaluate(desired, POLICIES).ok


def test_headroom_margin_is_a_parameter() -> None:
    desired = one_lane_state(gqa(), weight_bytes=85 * GIB)
    assert findings(desired, with_rule(POLICIES, "memory-budget", params={"headroom_warn_gib": 5})) == []


def test_stopped_lane_is_budgeted_but_only_warned() -> None:
    desired = one_lane_state(gqa(), weight_bytes=200 * GIB, desired="stopped")
    verdict = evaluate(desired, POLICIES)
    assert verdict.ok
    [finding] = findings(desired)
    assert finding.severity == "warn"
    assert finding.message.startswith("lane is stopped, would be denied when started: rank 0")
    assert finding.detail["would_deny"] is True
    [rank] = verdict.budgets
    assert not rank.running
    assert rank.need > rank.budget


def test_speculative_args_make_the_estimate_a_floor() -> None:
    desired = one_lane_state(gqa(), args=("--speculative-config", '{"method": "mtp"}'))
    verdict = evaluate(desired, POLICIES)
    [floor] = findings(desired)
    assert floor.severity == "warn"
    assert "floor" in floor.message
    assert all(b.floor for b in verdict.budgets)


def test_rule_severity_warn_caps_a_denial() -> None:
    desired = one_lane_state(gqa(), weight_bytes=200 * GIB)
    policies = with_rule(POLICIES, "memory-budget", severity="warn")
    [finding] = findings(desired, policies)
    assert finding.severity == "warn"
    assert evaluate(desired, policies).ok


def test_budgets_are_shown_even_when_the_rule_is_off() -> None:
    desired = one_lane_state(gqa(), weight_bytes=200 * GIB)
    policies = with_rule(POLICIES, "memory-budget", enabled=False)
    verdict = evaluate(desired, policies)
    assert verdict.ok
    assert len(verdict.budgets) == 1


def test_boot_utilization_above_cap_warns() -> None:
    desired = one_lane_state(gqa(), gpu_memory_utilization=0.9)
    [warn] = findings(desired, rule="boot-utilization")
    assert warn.severity == "warn"
    assert warn.detail["max_boot_utilization"] == 0.85
    assert warn.detail["boot_free_gib"] == 101.5
    assert "gpu_memory_utilization 0.90 asks for 109.5 GiB" in warn.message


def test_boot_utilization_at_or_below_cap_is_quiet() -> None:
    assert findings(one_lane_state(gqa(), gpu_memory_utilization=0.85), rule="boot-utilization") == []


def test_boot_utilization_can_be_made_a_denial() -> None:
    policies = with_rule(POLICIES, "boot-utilization", severity="deny")
    [deny] = findings(one_lane_state(gqa(), gpu_memory_utilization=0.9), policies, rule="boot-utilization")
    assert deny.severity == "deny"
