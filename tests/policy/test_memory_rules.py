"""memory-budget and boot-utilization findings: when they deny, warn or stay quiet, and what they say."""

from __future__ import annotations

import math

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
    budget = math.ceil(0.8 * GB10)  # vLLM: ceil(total x gpu_memory_utilization)
    weights, overhead = 40 * GIB, int(6.9 * GIB)  # rules.yaml overhead_gib.vllm 6.9
    assert weights + kv // 4 + overhead < budget  # the wrong rule (KV / tp) would let it through
    assert all(b.kv_min == kv for b in verdict.budgets)
    assert all(b.need == weights + kv + overhead > budget for b in verdict.budgets)
    # One finding for the lane, naming its four ranks (not four copies of one sentence).
    [deny] = [v for v in verdict.violations if v.severity == "deny"]
    assert not verdict.ok
    assert verdict.denied_lanes == frozenset({"l"})
    assert (deny.rank, deny.detail["ranks"], deny.detail["hosts"]) == (None, "0,1,2,3", "h0,h1,h2,h3")
    assert deny.detail["need"] == weights + kv + overhead
    assert deny.detail["budget"] == budget
    assert deny.detail["kv_min"] == kv
    # 40 + 64.37 + 6.9 = 111.27 GiB against 0.8 x 121.7 = 97.36 GiB.
    assert "ranks 0, 1, 2, 3 on h0, h1, h2, h3 each need up to 111.3 GiB" in deny.message
    assert "budget is 97.4 GiB (--gpu-memory-utilization 0.80 x 121.7 GiB total memory)" in deny.message
    # The suggestion is a max_model_len that really fits.
    fits = int(deny.detail["fitting_max_model_len"])
    assert f"lower max_model_len to {fits} or less" in deny.message
    assert weights + 1152 * 60 * fits + overhead <= budget < weights + 1152 * 60 * (fits + 1) + overhead
    # The latent cache is whole on every TP rank: dcp shrinks it, tp does not. dcp 2 keeps 500,000 tokens:
    # 40 + 32.2 + 6.9 = 79.1 GiB, under 97.4.
    assert deny.detail["fitting_dcp"] == 2
    assert "raise dcp to 2" in deny.message and "raise tp" not in deny.message


def test_weights_alone_over_budget_says_so() -> None:
    desired = one_lane_state(gqa(), weight_bytes=200 * GIB)
    [deny] = findings(desired)
    assert deny.severity == "deny"
    assert deny.detail["fitting_max_model_len"] == 0
    # 200 GiB of weights + 6.9 GiB of vLLM overhead.
    assert "weights and the rest alone need 206.9 GiB" in deny.message


def test_low_headroom_warns_with_numbers() -> None:
    # ceil(0.8 x 121.7 GiB) = 97.36 GiB; weights 85 + vLLM 6.9 + KV ~0.04 -> headroom ~5.4 GiB < 10.
    desired = one_lane_state(gqa(), weight_bytes=85 * GIB)
    [warn] = findings(desired)
    assert warn.severity == "warn"
    assert warn.detail["worst_rank"] == 0
    assert "rank 0 on h0 leave as little as 5.4 GiB of headroom, under the 10 GiB margin" in warn.message
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


def test_speculative_args_make_the_estimate_a_floor_only_for_an_unsized_method() -> None:
    # MTP is counted (rules.yaml drafter_gib.mtp and one layer of KV); a separate draft model has no figure.
    sized = one_lane_state(gqa(), args=("--speculative-config", '{"method": "mtp"}'))
    assert findings(sized) == []
    assert not any(b.floor for b in evaluate(sized, POLICIES).budgets)
    desired = one_lane_state(gqa(), args=("--speculative-config", '{"method": "draft_model", "model": "o/s"}'))
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


def test_boot_utilization_above_free_memory_warns() -> None:
    # vLLM asks ceil(0.9 x 121.7 GiB) = 109.5 GiB; the gb10 profile has 101.5 GiB free at boot.
    desired = one_lane_state(gqa(), gpu_memory_utilization=0.9)
    [warn] = findings(desired, rule="boot-utilization")
    assert warn.severity == "warn"
    assert warn.detail["asked"] == math.ceil(0.9 * GB10)
    assert warn.detail["boot_free_gib"] == 101.5
    assert warn.detail["fitting_utilization"] == 0.83  # floor(101.5 / 121.7 x 100) / 100 = floor(83.4) / 100
    assert "--gpu-memory-utilization 0.90 asks for 109.5 GiB" in warn.message


def test_boot_utilization_at_or_below_free_memory_is_quiet() -> None:
    # 0.83 x 121.7 = 101.0 GiB <= 101.5 GiB free. (0.85, the old cap, asks 103.4 GiB: vLLM refuses it.)
    assert findings(one_lane_state(gqa(), gpu_memory_utilization=0.83), rule="boot-utilization") == []
    assert len(findings(one_lane_state(gqa(), gpu_memory_utilization=0.85), rule="boot-utilization")) == 1


def test_boot_utilization_can_be_made_a_denial() -> None:
    policies = with_rule(POLICIES, "boot-utilization", severity="deny")
    [deny] = findings(one_lane_state(gqa(), gpu_memory_utilization=0.9), policies, rule="boot-utilization")
    assert deny.severity == "deny"
