"""The memory-budget rule holds the container's memory cap (fleet container.memory_limit) against the host's
memory and the rank's own figures."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from reconciler.policy import Verdict, evaluate
from reconciler.policy.rules.memcap import docker_bytes
from reconciler.spec.fleet import ContainerContract, FleetDefaults

from .builders import GIB, gqa, one_lane_state, only_rules, repo_policies, repo_state, with_profile

pytestmark = pytest.mark.timeout(30)

POLICIES = only_rules(with_profile(repo_policies(), "unit", torch_visible_gib=100, boot_free_gib=85), "memory-budget")
ARCH = gqa(layers=2, kv_heads=8, head_dim=64, num_heads=8)
WEIGHTS = 10 * GIB
KV_1000 = 2 * 8 * 64 * 2 * 2 * 1000  # K and V x 8 heads x 64 dims x 2 bytes (bf16) x 2 layers x 1000 tokens
VLLM_OVERHEAD = int(6.9 * GIB)  # rules.yaml overhead_gib.vllm
SGLANG_OVERHEAD = 10 * GIB  # rules.yaml overhead_gib.sglang


def run(cap: str | None, **lane: Any) -> Verdict:
    lane.setdefault("gpu_memory_utilization", 0.5)
    lane.setdefault("kv_cache_dtype", "bf16")
    desired = one_lane_state(ARCH, weight_bytes=WEIGHTS, hardware="unit", **lane)
    fleet = FleetDefaults(container=ContainerContract(memory_limit=cap))
    return evaluate(dataclasses.replace(desired, fleet=fleet), POLICIES)


def capped(verdict: Verdict) -> list[Any]:
    return [v for v in verdict.violations if v.rule == "memory-budget" and "container.memory_limit" in v.message]


def test_docker_sizes_are_binary() -> None:
    assert docker_bytes("112g") == 112 * 1024**3
    assert docker_bytes("512m") == 512 * 1024**2
    assert (docker_bytes("64k"), docker_bytes("4096b"), docker_bytes("4096")) == (65536, 4096, 4096)
    assert docker_bytes("1.5g") is None


def test_a_cap_at_the_hosts_memory_is_denied_naming_the_lane_file_and_field() -> None:
    # The unit profile's memory is 100 GiB: a cap of exactly that never binds before the host runs out.
    [deny] = capped(run("100g"))
    assert deny.severity == "deny" and deny.lane == "l"
    assert deny.message.startswith("lanes/l: its ranks run under fleet.yaml container.memory_limit 100g (100.0 GiB)")
    assert "at or above the 100.0 GiB of memory of h0 (policies/hardware.yaml unit.memory_total)" in deny.message
    assert (deny.detail["field"], deny.detail["file"], deny.detail["host_memory_gib"]) == (
        "container.memory_limit",
        "lanes/l",
        100.0,
    )
    assert capped(run("150g"))  # above it, likewise
    assert capped(run("99g")) == []  # below the host, and over what the rank takes (50 GiB): nothing to say


def test_a_cap_under_the_ranks_need_is_denied_naming_both_figures() -> None:
    # vLLM: the rank needs 10 GiB of weights + 4,096,000 B of KV + 6.9 GiB of overhead = 16.94 GiB.
    need = WEIGHTS + KV_1000 + VLLM_OVERHEAD
    assert f"{need / GIB:.1f}" == "16.9"
    [deny] = capped(run("16g"))
    assert deny.severity == "deny" and deny.rank == 0 and deny.host == "h0"
    assert "lanes/l: rank 0 on h0 needs 16.9 GiB" in deny.message
    assert "capped at fleet.yaml container.memory_limit 16g (16.0 GiB)" in deny.message
    assert deny.detail["rank_need"] == need
    assert deny.detail["memory_limit_gib"] == 16.0


def test_a_cap_under_what_the_engine_takes_at_start_is_denied() -> None:
    # vLLM takes its whole budget, ceil(0.5 x 100 GiB) = 50 GiB, although the rank needs only 16.9 GiB.
    [deny] = capped(run("17g"))
    assert "vLLM takes its whole budget at start, 50.0 GiB (--gpu-memory-utilization 0.50)" in deny.message
    assert deny.detail["rank_takes"] == math.ceil(0.5 * 100 * GIB)
    assert capped(run("50g")) == []
    # SGLang: 0.5 x the 85 GiB free at boot = 42.5 GiB of static pool, and its 10 GiB overhead outside it.
    takes = int(0.5 * 85 * GIB) + SGLANG_OVERHEAD
    [deny] = capped(run("52g", engine="sglang", engine_version="0.5.19"))
    assert "SGLang takes its whole budget at start, 52.5 GiB" in deny.message
    assert "and the overhead outside it" in deny.message
    assert deny.detail["rank_takes"] == takes
    assert capped(run("53g", engine="sglang", engine_version="0.5.19")) == []


def test_a_lane_the_budget_already_refuses_is_not_held_against_the_cap_too() -> None:
    # 0.1 x 100 GiB = 10 GiB cannot hold 16.9 GiB: the budget check denies it; a 5 GiB cap adds nothing to that.
    found = [v for v in run("5g", gpu_memory_utilization=0.1).violations if v.rule == "memory-budget"]
    assert len(found) == 1 and "container.memory_limit" not in found[0].message


def test_no_cap_no_finding() -> None:
    assert capped(run(None)) == []


def test_the_example_fleet_cap_fits_its_sparks_and_lanes() -> None:
    # fleet.yaml's 112g (112 GiB) is under a GB10's 128 GB (119.2 GiB, policies/hardware.yaml gb10.memory_total)
    # and over what every example lane's ranks take.
    verdict = evaluate(repo_state("HEAD"), repo_policies())
    assert capped(verdict) == []


def test_an_engine_not_known_to_fill_its_budget_is_held_to_its_need_only() -> None:
    # A generic engine is given no fraction: its need (10 GiB + KV + rules.yaml overhead_gib.generic 4 GiB,
    # about 14 GiB) under a 17 GiB cap is fine, although 0.5 x 100 GiB would not be.
    assert capped(run("17g", engine="generic", args=("serve",))) == []
    assert capped(run("13g", engine="generic", args=("serve",)))
