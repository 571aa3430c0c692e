"""Property tests: random valid lanes and models never crash `evaluate`, and the arithmetic holds."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.policy import evaluate
from reconciler.policy.kv import KVModel, KVParams
from reconciler.spec.lane import Lane
from reconciler.spec.load import DesiredState
from reconciler.spec.model import Architecture, ModelSpec
from tests.support.properties import examples

from .builders import DIGEST, SHA, host, repo_policies, state

pytestmark = pytest.mark.timeout(30)

POLICIES = repo_policies()
KV_DTYPES = [
    "auto",
    "bf16",
    "bfloat16",
    "fp16",
    "float16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "nvfp4",
    "fp8_ds_mla",
    "nvfp4_ds_mla",
]
HOSTS = [f"h{i}" for i in range(8)]


@st.composite
def architectures(draw: st.DrawFn) -> Architecture:
    layers = draw(st.integers(1, 96))
    kind = draw(st.sampled_from(["mha", "gqa", "mla"]))
    fields: dict[str, Any] = {"layers": layers, "attention": kind}
    if kind == "mla":
        fields["kv_lora_rank"] = draw(st.sampled_from([256, 448, 512]))
        fields["rope_dim"] = draw(st.sampled_from([32, 64]))
        fields["kv_slot_bytes"] = draw(st.none() | st.sampled_from([584, 656]))
        if draw(st.booleans()):
            fields["compress_ratios"] = draw(
                st.lists(st.sampled_from([0.5, 1.0, 4.0, 128.0]), min_size=layers, max_size=layers)
            )
    else:
        kv_heads = draw(st.sampled_from([1, 2, 4, 8, 16, 64]))
        fields["kv_heads"] = kv_heads
        fields["head_dim"] = draw(st.sampled_from([64, 128, 256]))
        fields["num_heads"] = kv_heads if kind == "mha" else kv_heads * draw(st.sampled_from([1, 2, 4, 8]))
    if draw(st.booleans()):
        fields["sliding_window"] = draw(st.integers(1, 1 << 16))
    fields["sliding_window_layers"] = draw(st.integers(0, layers))
    if draw(st.booleans()):
        fields["index_head_dim"] = draw(st.sampled_from([64, 128]))
        fields["index_dtype_bytes"] = draw(st.sampled_from([0.5625, 1.0, 2.0]))
    linear = draw(st.integers(0, layers))
    if linear:
        fields["linear_layers"] = linear
        fields["linear_state_bytes"] = draw(st.integers(1, 1 << 26))
    return Architecture(**fields)


@st.composite
def lanes(draw: st.DrawFn, index: int) -> Lane:
    tp = draw(st.sampled_from([1, 2, 3, 4, 8]))
    pp = draw(st.sampled_from([1, 2, 3]))
    count = tp * pp if draw(st.integers(0, 4)) else draw(st.integers(1, 8))
    hosts = draw(
        st.lists(st.sampled_from([*HOSTS, "ghost"]), min_size=min(count, 9), max_size=min(count, 9), unique=True)
    )
    return Lane(
        name=f"lane{index}",
        desired=draw(st.sampled_from(["running", "stopped"])),
        engine=draw(st.sampled_from(["sglang", "vllm", "flare", "generic"])),
        engine_version=draw(st.sampled_from(["0.26.1rc0+glm53.r39.vllm9e5d1793", "0.32.0", "weird", "0.0.0.dev1"])),
        image=draw(st.sampled_from([f"r/img@{DIGEST}", "r/img:latest"])),
        model=draw(st.sampled_from(["m0", "m1"])),
        hosts=tuple(hosts),
        tp=tp,
        pp=pp,
        ep=draw(st.integers(1, 8)),
        dcp=draw(st.sampled_from([1, 2, 3, 4])),
        max_model_len=draw(st.integers(1, 1 << 21)),
        kv_cache_dtype=draw(st.sampled_from(KV_DTYPES)),
        gpu_memory_utilization=draw(st.floats(0.05, 1.0)),
        port=draw(st.sampled_from([8000, 8001])),
        args=tuple(draw(st.lists(st.sampled_from(["--speculative-config", "x", "--api-key"]), max_size=3))),
        env=draw(
            st.dictionaries(
                st.sampled_from(["HF_TOKEN", "A", "TOKENIZERS_PARALLELISM"]),
                st.sampled_from(["1", "/p", "hf_" + "a" * 34]),
                max_size=2,
            )
        ),
    )


@st.composite
def states(draw: st.DrawFn) -> DesiredState:
    models = [
        ModelSpec(
            name=f"m{i}",
            hf_repo=f"o/m{i}",
            revision=draw(st.sampled_from([SHA, "main", None])),
            path=f"/models/m{i}",
            weight_bytes=draw(st.integers(1, 600 << 30)),
            quantization=draw(st.sampled_from(["bf16", "mxfp4", "nvfp4"])),
            architecture=draw(architectures()),
        )
        for i in range(2)
    ]
    hosts = [host(h, draw(st.sampled_from(["gb10", "gb10", "unknown-profile"]))) for h in HOSTS[:6]]
    count = draw(st.integers(1, 6))
    return state(hosts, models, [draw(lanes(i)) for i in range(count)])


@settings(max_examples=examples(250), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(states())
def test_random_states_never_crash(desired: DesiredState) -> None:
    verdict = evaluate(desired, POLICIES)
    assert verdict.ok == all(v.severity == "warn" for v in verdict.violations)
    for rank in verdict.budgets:
        # vLLM counts the overhead inside its budget; SGLang keeps it in the remainder outside the fraction.
        inside = rank.overhead if rank.overhead_inside else 0
        assert rank.need == rank.weights + rank.kv_min + rank.drafter + inside
        assert rank.overhead_inside == (rank.engine != "sglang")
        assert rank.headroom == rank.budget - rank.need
        assert rank.kv_min == sum(rank.kv_parts.values())
        assert rank.kv_min >= 0
    for v in verdict.violations:
        assert v.message
        if v.lane is not None and not desired.lanes[v.lane].running and v.rule != "secrets-by-name":
            assert v.severity == "warn"
        assert "a" * 34 not in v.message
    json.dumps(verdict.to_json())


@settings(max_examples=examples(200), deadline=None)
@given(
    architectures(),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([1, 2, 3]),
    st.sampled_from([1, 2]),
    st.sampled_from(KV_DTYPES),
    st.integers(1, 1 << 20),
    st.integers(1, 1 << 20),
)
def test_kv_grows_with_length_and_the_fit_search_is_exact(
    arch: Architecture, tp: int, pp: int, dcp: int, dtype: str, short: int, long: int
) -> None:
    rules = POLICIES.rules.rules["memory-budget"].params
    params = KVParams(dtype_bytes=rules["kv_dtype_bytes"], slot_bytes=rules["mla_slot_bytes"])  # type: ignore[arg-type]
    kv = KVModel(arch, tp=tp, pp=pp, dcp=dcp, kv_cache_dtype=dtype, params=params)
    short, long = min(short, long), max(short, long)
    for stage in range(pp):
        assert kv.stage(stage, short).total <= kv.stage(stage, long).total
        available = kv.stage(stage, short).total
        fits = kv.longest_fitting(stage, available, long)
        assert short <= fits <= long
        assert kv.stage(stage, fits).total <= available
        if fits < long:
            assert kv.stage(stage, fits + 1).total > available
