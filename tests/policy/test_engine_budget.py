"""The budget in each engine's own terms, every expected figure worked out by hand here.

The hardware is a round profile ("unit": 100 GiB total, 85 GiB free at boot)
and the model a two-layer MHA whose KV is easy to count: 2 (K and V) x 8
heads x 64 x 2 B (bf16) = 2048 B per token per layer, 4096 B per token over
both layers, 4,096,000 B for max_model_len 1000. Overheads are the repo's
rules.yaml figures (vllm 6.9 GiB, sglang 10 GiB), written out below.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from reconciler.policy import RankBudget, Verdict, evaluate
from reconciler.policy.hostmem import HostMemory

from .builders import GIB, gqa, mla, one_lane_state, only_rules, repo_policies, with_profile, with_rule

pytestmark = pytest.mark.timeout(30)

POLICIES = only_rules(
    with_profile(repo_policies(), "unit", torch_visible_gib=100, boot_free_gib=85),
    "memory-budget",
    "boot-utilization",
    "host-sharing",
)
TOTAL = 100 * GIB
BOOT = 85 * GIB
VLLM_OVERHEAD = int(6.9 * GIB)  # rules.yaml overhead_gib.vllm
SGLANG_OVERHEAD = 10 * GIB  # rules.yaml overhead_gib.sglang
ARCH = gqa(layers=2, kv_heads=8, head_dim=64, num_heads=8)
KV_1000 = 2 * 8 * 64 * 2 * 2 * 1000  # 4,096,000 B
PER_TOKEN = 2 * 8 * 64 * 2 * 2  # 4096 B over both layers


def run(host_memory: dict[str, HostMemory] | None = None, policies: Any = POLICIES, **lane: Any) -> Verdict:
    lane.setdefault("gpu_memory_utilization", 0.5)
    lane.setdefault("kv_cache_dtype", "bf16")
    weight_bytes = lane.pop("weight_bytes", 10 * GIB)
    arch = lane.pop("arch", ARCH)
    desired = one_lane_state(arch, weight_bytes=weight_bytes, hardware="unit", **lane)
    return evaluate(desired, policies, host_memory=host_memory)


def ranks(**lane: Any) -> list[RankBudget]:
    return list(run(**lane).budgets)


def found(verdict: Verdict, rule: str = "memory-budget") -> list[Any]:
    return [v for v in verdict.violations if v.rule == rule]


# -- vLLM: a fraction of total memory, covering weights + KV + activations ---------------------------


def test_vllm_budget_is_a_fraction_of_total_memory_and_covers_the_overhead() -> None:
    [rank] = ranks(engine="vllm")
    budget = math.ceil(0.5 * TOTAL)  # vllm/v1/worker/utils.py request_memory: ceil(total x utilization)
    assert budget == 50 * GIB
    need = 10 * GIB + KV_1000 + VLLM_OVERHEAD
    assert (rank.budget, rank.need, rank.headroom) == (budget, need, budget - need)
    assert rank.flag == "--gpu-memory-utilization"
    assert (rank.base, rank.base_bytes, rank.base_origin) == ("torch_visible", TOTAL, "profile")
    assert rank.overhead_inside and rank.remainder == 0
    assert rank.pool == budget - 10 * GIB - VLLM_OVERHEAD
    assert rank.context == 1000


def test_vllm_utilization_in_args_wins_over_the_field() -> None:
    # The lane's args come after the rendered flag, and argparse keeps the last value.
    [rank] = ranks(engine="vllm", args=("--gpu-memory-utilization", "0.6"))
    assert rank.budget == math.ceil(0.6 * TOTAL)
    assert rank.utilization == 0.6


def test_vllm_kv_cache_memory_bytes_fixes_the_kv_and_the_budget_is_free_memory() -> None:
    # 2G is 2 x 2^30 (vllm/utils/argparse_utils.py human_readable_int: upper case is binary).
    [rank] = ranks(engine="vllm", args=("--kv-cache-memory-bytes", "2G"))
    assert rank.kv_min == 2 * GIB and rank.kv_source == "--kv-cache-memory-bytes"
    assert rank.need == 10 * GIB + 2 * GIB + VLLM_OVERHEAD
    assert (rank.base, rank.budget) == ("boot_free", BOOT)  # vLLM no longer keeps to the fraction
    assert rank.pool == 2 * GIB
    # lower case is decimal: 3g = 3,000,000,000 B.
    [rank] = ranks(engine="vllm", args=("--kv-cache-memory-bytes=3g",))
    assert rank.kv_min == 3_000_000_000


def test_vllm_kv_cache_memory_bytes_too_small_for_one_request_denies() -> None:
    # 1,000,000 B hold 1,000,000 // 4096 = 244 tokens of the 1000 max_model_len asks for.
    verdict = run(engine="vllm", args=("--kv-cache-memory-bytes", "1000000"))
    [deny] = found(verdict)
    assert deny.severity == "deny"
    assert verdict.budgets[0].context == 1_000_000 // PER_TOKEN == 244
    assert "refuses to start" in deny.message and "--kv-cache-memory-bytes" in deny.message


def test_vllm_boot_check_uses_the_profile_then_the_observation() -> None:
    # ceil(0.9 x 100 GiB) = 90 GiB asked; 85 GiB free by the profile: vLLM would refuse to start.
    [warn] = found(run(engine="vllm", gpu_memory_utilization=0.9), "boot-utilization")
    assert warn.detail["asked"] == 90 * GIB and warn.detail["boot_free"] == BOOT
    assert warn.detail["fitting_utilization"] == 0.85  # floor(85 / 100 x 100) / 100
    assert "--gpu-memory-utilization 0.90 asks for 90.0 GiB" in warn.message
    assert "policies/hardware.yaml unit.boot_free" in warn.message
    # A probe saw 95 GiB available on the idle host: 90 GiB fits, no finding.
    seen = {"h0": HostMemory(host="h0", available=95 * GIB, observed_at=1_700_000_000.0)}
    assert found(run(seen, engine="vllm", gpu_memory_utilization=0.9), "boot-utilization") == []
    # ... and 80 GiB observed denies with the observation named, time included.
    seen = {"h0": HostMemory(host="h0", available=80 * GIB, observed_at=1_700_000_000.0)}
    [warn] = found(run(seen, engine="vllm", gpu_memory_utilization=0.9), "boot-utilization")
    assert warn.detail["boot_free"] == 80 * GIB
    assert "MemAvailable on h0 at 2023-11-14T22:13:20Z" in warn.message


# -- SGLang: a fraction of the free memory at boot, covering weights + KV only ------------------------


def test_sglang_budget_is_a_fraction_of_free_memory_and_leaves_the_overhead_outside() -> None:
    [rank] = ranks(engine="sglang")
    budget = int(0.5 * BOOT)  # 42.5 GiB of the 85 GiB free at boot
    need = 10 * GIB + KV_1000  # no overhead inside
    assert (rank.budget, rank.need, rank.headroom) == (budget, need, budget - need)
    assert rank.flag == "--mem-fraction-static"
    assert (rank.base, rank.base_bytes, rank.base_origin) == ("boot_free", BOOT, "profile")
    assert not rank.overhead_inside and rank.overhead == SGLANG_OVERHEAD
    assert rank.remainder == BOOT - budget
    assert rank.pool == budget - 10 * GIB


def test_sglang_takes_the_minimum_free_memory_over_ranks_from_observations() -> None:
    seen = {
        "h0": HostMemory(host="h0", available=90 * GIB, observed_at=1_700_000_000.0),
        "h1": HostMemory(host="h1", available=80 * GIB, observed_at=1_700_000_060.0),
    }
    verdict = run(seen, engine="sglang", tp=2)
    for rank in verdict.budgets:
        assert (rank.base_bytes, rank.base_origin) == (80 * GIB, "observed")
        assert rank.budget == int(0.5 * 80 * GIB)
        assert "on h1" in rank.base_source
    # 80 < 0.9 x 90: SGLang's TP memory-balance warning, said before boot.
    [imbalance] = [v for v in found(verdict, "boot-utilization") if "differs" in v.message]
    assert imbalance.detail["min_host"] == "h1"


def test_a_busy_host_is_not_a_boot_view_and_falls_back_to_the_profile() -> None:
    seen = {"h0": HostMemory(host="h0", available=30 * GIB, observed_at=1.0, busy=("other",))}
    [rank] = list(run(seen, engine="sglang").budgets)
    assert (rank.base_bytes, rank.base_origin) == (BOOT, "profile")
    assert "while other runs there" in rank.base_source


def test_a_host_whose_total_is_not_its_profiles_falls_back_to_the_profile() -> None:
    # The test profile's total is 100 GiB: a host with 31 GiB of MemTotal (a test box, a misdeclared
    # profile) is not that machine, and its 20 GiB available says nothing of a boot on it.
    seen = {"h0": HostMemory(host="h0", available=20 * GIB, observed_at=1.0, total=31 * GIB)}
    [rank] = list(run(seen, engine="sglang").budgets)
    assert (rank.base_bytes, rank.base_origin) == (BOOT, "profile")
    assert "MemTotal 31.0 GiB is not the unit profile's 100.0 GiB" in rank.base_source
    # 97 GiB of MemTotal is within 5 % of 100 GiB: the observation stands.
    seen = {"h0": HostMemory(host="h0", available=90 * GIB, observed_at=1.0, total=97 * GIB)}
    [rank] = list(run(seen, engine="sglang").budgets)
    assert (rank.base_bytes, rank.base_origin) == (90 * GIB, "observed")


def test_sglang_pool_under_max_model_len_denies_with_the_context_it_would_give() -> None:
    # weights 40 GiB of a 42.5 GiB budget leave a 2.5 GiB pool: 2.5 x 2^30 / 4096 = 655,360 tokens.
    verdict = run(engine="sglang", weight_bytes=40 * GIB, max_model_len=1_000_000)
    [deny] = found(verdict)
    assert deny.severity == "deny"
    rank = verdict.budgets[0]
    assert rank.pool == int(0.5 * BOOT) - 40 * GIB
    assert rank.context == (int(0.5 * BOOT) - 40 * GIB) // PER_TOKEN == 655_360
    assert "silently cap every request at 655360 tokens" in deny.message
    assert "--mem-fraction-static 0.50 x 85.0 GiB free at boot" in deny.message


def test_sglang_weights_over_the_static_budget_refuse_to_start() -> None:
    [deny] = found(run(engine="sglang", weight_bytes=50 * GIB))  # 50 > 42.5 GiB
    assert "SGLang refuses to start" in deny.message


def test_sglang_max_total_tokens_caps_the_context() -> None:
    verdict = run(engine="sglang", args=("--max-total-tokens", "500"))
    [deny] = found(verdict)
    assert verdict.budgets[0].context == 500 and verdict.budgets[0].kv_source == "--max-total-tokens"
    assert "every request is cut at 500 tokens" in deny.message


def test_sglang_boot_check_is_the_remainder_against_the_overhead() -> None:
    # 0.95 of 85 GiB leaves 85 - int(0.95 x 85 GiB) = 4.25 GiB outside, under the 10 GiB overhead.
    [warn] = found(run(engine="sglang", gpu_memory_utilization=0.95), "boot-utilization")
    assert warn.detail["remainder"] == BOOT - int(0.95 * BOOT)
    assert warn.detail["fitting_utilization"] == 0.88  # floor((1 - 10 / 85) x 100) / 100 = floor(88.2) / 100
    assert "--mem-fraction-static 0.95 leaves 4.2 GiB" in warn.message
    assert found(run(engine="sglang", gpu_memory_utilization=0.85), "boot-utilization") == []  # 12.75 >= 10


# -- FLARE and generic ------------------------------------------------------------------------------


def test_flare_reads_like_vllm_and_generic_has_no_boot_check() -> None:
    [rank] = ranks(engine="flare", args=("--preset", "x"))
    assert (rank.base, rank.budget, rank.overhead) == ("torch_visible", 50 * GIB, 3 * GIB)
    generic = run(engine="generic", gpu_memory_utilization=0.99, args=("serve",))
    assert found(generic, "boot-utilization") == []


# -- what the rank holds --------------------------------------------------------------------------


def test_weights_kept_off_the_gpu_are_declared_not_guessed() -> None:
    # 100 GiB checkpoint, 60 GiB streamed from disk, tp 2: (100 - 60) / 2 = 20 GiB a rank.
    [a, b] = ranks(engine="vllm", tp=2, weight_bytes=100 * GIB, offloaded_weight_bytes=60 * GIB)
    assert a.weights == b.weights == 20 * GIB


def test_drafter_counted_per_method() -> None:
    one_layer = 2 * 8 * 64 * 2 * 1000  # one more attention layer of KV: 2,048,000 B
    [mtp] = ranks(engine="vllm", args=("--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'))
    assert mtp.drafter == 0 + one_layer and not mtp.floor  # rules.yaml drafter_gib.mtp 0: in the checkpoint
    assert mtp.need == 10 * GIB + KV_1000 + one_layer + VLLM_OVERHEAD
    eagle = '{"method": "eagle3", "model": "org/head", "num_speculative_tokens": 3}'
    [head] = ranks(engine="vllm", args=("--speculative-config", eagle))
    assert head.drafter == 2 * GIB + one_layer  # drafter_gib.eagle 2
    [nextn] = ranks(engine="sglang", args=("--speculative-algorithm", "NEXTN"))
    assert nextn.drafter == one_layer
    [ngram] = ranks(engine="vllm", args=("--speculative-config", '{"method": "ngram"}'))
    assert ngram.drafter == 0
    draft = run(engine="vllm", args=("--speculative-config", '{"model": "org/small"}'))
    assert draft.budgets[0].floor
    assert any("floor" in v.message for v in found(draft))


def test_overhead_per_model_class() -> None:
    policies = with_rule(
        POLICIES,
        "memory-budget",
        params={"overhead_gib": {"vllm": 6.9, "vllm.mla": 8, "sglang": 10, "flare": 3, "generic": 4}},
    )
    [rank] = list(run(policies=policies, engine="vllm", arch=mla(layers=2)).budgets)
    assert rank.overhead == 8 * GIB
    [rank] = list(run(policies=policies, engine="vllm").budgets)
    assert rank.overhead == VLLM_OVERHEAD


# -- advice, once per lane ------------------------------------------------------------------------


def test_mla_deny_names_dcp_not_tp_once_for_all_ranks() -> None:
    # MLA bf16 (512 + 64) x 2 = 1152 B per token per layer, whole on each TP rank: 10 layers x 1,000,000 tokens
    # = 11.52e9 B (10.7 GiB). Budget 50 GiB - weights 40/4 = 10 - overhead 6.9 leaves 33.1 GiB: fits. With
    # 60 GiB weights (15 a rank) and 1,000,000 x 40 layers = 46.08e9 B (42.9 GiB): over 50 - 15 - 6.9 = 28.1.
    # dcp 2 halves it to 21.5 GiB: fits.
    verdict = run(engine="vllm", arch=mla(layers=40), tp=4, weight_bytes=60 * GIB, max_model_len=1_000_000)
    [deny] = found(verdict)
    assert deny.rank is None and deny.detail["ranks"] == "0,1,2,3"
    assert deny.message.startswith("ranks 0, 1, 2, 3 on h0, h1, h2, h3 each need up to")
    assert deny.detail["fitting_dcp"] == 2
    assert "raise dcp to 2" in deny.message and "raise tp" not in deny.message


def test_gqa_deny_names_tp() -> None:
    # 8 KV heads, 20 layers: 2 x 8 x 64 x 2 x 20 = 40960 B per token; 1,000,000 tokens = 38.1 GiB, over the
    # 50 - 10 - 6.9 = 33.1 GiB room.
    verdict = run(engine="vllm", arch=gqa(layers=20, kv_heads=8, head_dim=64), max_model_len=1_000_000)
    [deny] = found(verdict)
    assert "raise tp (the 8 KV heads split over tp)" in deny.message
    assert "set kv_cache_dtype: fp8" in deny.message  # 19.1 GiB fits the 33.1 GiB room
    # 33.1 GiB / 40960 B = floor((50 GiB - 10 GiB - int(6.9 GiB)) / 40960) tokens.
    assert deny.detail["fitting_max_model_len"] == (50 * GIB - 10 * GIB - VLLM_OVERHEAD) // 40960


# -- host sharing in each engine's terms ----------------------------------------------------------


def test_sglang_next_to_vllm_must_fit_in_either_start_order() -> None:
    from .builders import host, lane, model, state

    desired = state(
        [host("h0", "unit")],
        [model("m", arch=ARCH, weight_bytes=10 * GIB)],
        [
            lane("v", "m", ["h0"], engine="vllm", gpu_memory_utilization=0.4, kv_cache_dtype="bf16"),
            lane(
                "s",
                "m",
                ["h0"],
                engine="sglang",
                gpu_memory_utilization=0.8,
                kv_cache_dtype="bf16",
                port=8001,
                served_model_name="s",
            ),
        ],
    )
    verdict = evaluate(desired, POLICIES)
    sharing = found(verdict, "host-sharing")
    # vLLM takes ceil(0.4 x 100) = 40 GiB; SGLang needs 10 GiB + 4,096,000 B + 10 GiB outside: 60 GiB in all,
    # under 85. But started first SGLang takes 0.8 x 85 = 68 GiB + 10 outside = 78 GiB, leaving 7 for vLLM's 40.
    assert {v.lane for v in sharing} == {"s", "v"}
    detail = sharing[0].detail
    assert detail["sum_takes"] == 40 * GIB + 10 * GIB + KV_1000 + SGLANG_OVERHEAD
    assert "started first, SGLang lane s takes --mem-fraction-static 0.80" in sharing[0].message


def test_dcp_is_not_offered_where_the_engine_refuses_it() -> None:
    # The lane of test_mla_deny_names_dcp_not_tp_once_for_all_ranks with half its layers sliding-window: vLLM
    # refuses DCP with sliding-window layers (kv.py), so dcp is no lever there.
    arch = mla(layers=40, sliding_window=128, sliding_window_layers=20)
    verdict = run(engine="vllm", arch=arch, tp=4, weight_bytes=60 * GIB, max_model_len=2_000_000)
    [deny] = found(verdict)
    assert "raise dcp" not in deny.message and "fitting_dcp" not in deny.detail
    assert "raise pp" in deny.message


MTP = ("--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}')


def test_a_dsa_drafter_layer_keeps_its_indexer_on_vllm_and_sglang() -> None:
    # GLM-5-like: 4 latent layers, an indexer on layer 0 only. vLLM's MTP layer always builds an indexer
    # (vllm/models/deepseek_v32/attention.py is_mtp_layer), SGLang sizes the draft's indexer on every draft layer
    # (pool_configurator.py allocate_all_layers): (512 + 64) x 2 B + 128 + 4 B = 1,284 B x 1000 tokens.
    arch = mla(layers=4, index_head_dim=128, indexer_layers=(0,))
    [vllm] = ranks(engine="vllm", arch=arch, args=MTP)
    [sglang] = ranks(engine="sglang", arch=arch, args=("--speculative-algorithm", "NEXTN"))
    assert vllm.drafter == sglang.drafter == 1284 * 1000
    assert vllm.kv_parts["indexer"] == 132 * 1000  # the target: one indexed layer of four


def test_vllms_deepseek_v4_drafter_is_one_sliding_window_layer() -> None:
    # vLLM 0.33.0 builds the V4 MTP layer SWA-only (compress_ratio 1 past num_hidden_layers): a window of
    # min(128 - 1 + 2 x 2048 in flight, 1000) = 1000 tokens in 64-token blocks, cdiv(1000, 64) + 1 = 17 blocks,
    # 1088 tokens x (448 + 64) x 2 B = 1,114,112 B; one full latent layer would be 1000 x 1024 = 1,024,000.
    arch = mla(layers=4, kv_lora_rank=448, compress_ratios=(1.0, 4.0, 128.0, 1.0), sliding_window=128)
    [rank] = ranks(engine="vllm", arch=arch, args=MTP, engine_version="0.33.0")
    assert rank.drafter == 1088 * 1024


def test_sglangs_drafter_is_an_average_target_layer_of_a_hybrid_model() -> None:
    # SGLang scales the target's cell by draft layers / layers (pool_configurator.py): two full layers of 1000
    # tokens and two sliding ones of min(1000, 256) at 2 x 8 x 64 x 2 = 2,048 B a token: (2 x 1000 + 2 x 256) x
    # 2048 / 4. vLLM gives the draft a full attention layer of its own: 1000 x 2048.
    arch = gqa(layers=4, kv_heads=8, head_dim=64, sliding_window=256, sliding_window_layers=2)
    [sglang] = ranks(engine="sglang", arch=arch, args=("--speculative-algorithm", "NEXTN"))
    assert sglang.drafter == (2 * 1000 + 2 * 256) * 2048 // 4
    [vllm] = ranks(engine="vllm", arch=arch, args=MTP)
    assert vllm.drafter == 1000 * 2048
