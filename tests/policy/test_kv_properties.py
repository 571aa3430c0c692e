"""Property tests for the engine-aware KV arithmetic: more context never costs less, the fit search is exact.

Sliding-window reserves, hybrid page padding and the counted-hybrid upper
bound all feed `longest_fitting`, a binary search that is only right if the
KV of a stage never shrinks as max_model_len grows.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.policy.enginekv import KVSettings
from reconciler.policy.kv import KVModel, KVParams
from reconciler.policy.stages import sglang_split, vllm_split
from reconciler.spec.model import Architecture
from tests.support.properties import examples

pytestmark = pytest.mark.timeout(60)

PARAMS = KVParams(dtype_bytes={"bf16": 2.0, "fp8": 1.0}, slot_bytes={"fp8_ds_mla": 656.0})


@st.composite
def hybrids(draw: st.DrawFn) -> Architecture:
    layers = draw(st.integers(2, 48))
    fields: dict[str, Any] = {
        "layers": layers,
        "attention": "gqa",
        "kv_heads": draw(st.sampled_from([1, 2, 4, 8])),
        "head_dim": draw(st.sampled_from([64, 128, 256])),
        "sliding_window": draw(st.none() | st.integers(1, 8192)),
        "linear_state_bytes": draw(st.integers(1, 1 << 24)),
    }
    if draw(st.booleans()):
        fields["layer_types"] = tuple(
            draw(st.lists(st.sampled_from(["full", "sliding", "linear"]), min_size=layers, max_size=layers))
        )
    else:
        linear = draw(st.integers(0, layers))
        fields["linear_layers"] = linear
        fields["sliding_window_layers"] = draw(st.integers(0, layers - linear))
    return Architecture(**fields)


@settings(max_examples=examples(150), deadline=None)
@given(
    hybrids(),
    st.sampled_from([1, 2, 4]),
    st.sampled_from([1, 2, 3]),
    st.sampled_from(["vllm", "sglang"]),
    st.booleans(),
    st.integers(1, 1 << 18),
    st.integers(1, 1 << 18),
)
def test_kv_grows_with_length_and_the_fit_search_is_exact(
    arch: Architecture, tp: int, pp: int, engine: str, unify: bool, short: int, long: int
) -> None:
    if pp > arch.layers:
        pp = 1
    split = vllm_split if engine == "vllm" else sglang_split
    kv_settings = KVSettings(
        engine=engine,
        block_size=16,
        in_flight_tokens=4096 if engine == "vllm" else None,
        linear_blocks=2 if unify else 1,
        unify_pages=unify and engine == "vllm",
    )
    kv = KVModel(
        arch,
        tp=tp,
        pp=pp,
        dcp=1,
        kv_cache_dtype="bf16",
        params=PARAMS,
        settings=kv_settings,
        partition=split(arch.layers, pp),
    )
    short, long = min(short, long), max(short, long)
    for stage in range(pp):
        small = kv.stage(stage, short)
        assert small.total == sum(small.parts.values())
        assert small.total <= kv.stage(stage, long).total
        fits = kv.longest_fitting(stage, small.total, long)
        assert short <= fits <= long
        assert kv.stage(stage, fits).total <= small.total
        if fits < long:
            assert kv.stage(stage, fits + 1).total > small.total


@pytest.mark.parametrize("linear_state_bytes", [1 << 22, 1 << 24])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_a_counted_hybrids_padded_stage_never_costs_less_at_a_longer_length(linear_state_bytes: int, tp: int) -> None:
    """The case the property found: one linear and one window-1 layer of three, pipeline stage 0 of 2 under vLLM's
    unified pages. Ranking the kinds by their cost at each length chose another mix at 4,112 tokens than at 1,
    and the stage's bound fell by a quarter (16.8 -> 12.6 MB at tp 1), which the fit search cannot take."""
    arch = Architecture(
        layers=3,
        attention="gqa",
        kv_heads=1,
        head_dim=64,
        sliding_window=1,
        linear_state_bytes=linear_state_bytes,
        linear_layers=1,
        sliding_window_layers=1,
    )
    kv_settings = KVSettings(engine="vllm", block_size=16, in_flight_tokens=4096, linear_blocks=2, unify_pages=True)
    kv = KVModel(
        arch, tp=tp, pp=2, dcp=1, kv_cache_dtype="bf16", params=PARAMS, settings=kv_settings, partition=vllm_split(3, 2)
    )
    totals = [kv.stage(0, length).total for length in (1, 16, 4112, 1 << 18)]
    assert totals == sorted(totals)
