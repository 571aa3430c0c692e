"""SGLang's DeepSeek V4 path takes a KV cache of fp8_e4m3 or bfloat16 only: any other dtype denies the lane.

SGLang asserts it at start (sglang/srt/arg_groups/overrides.py `_deepseek_v4_kv_cache_dtype`), so
`lanes check` refuses it first, naming the lane file, the field and the dtypes the path takes.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconciler.policy import evaluate
from reconciler.policy.verdict import Violation
from reconciler.spec.load import DesiredState
from tests.support.example import PRODUCTION, example_policies, example_state, with_lane

pytestmark = pytest.mark.timeout(60)


def _render_findings(state: DesiredState) -> list[Violation]:
    verdict = evaluate(state, example_policies())
    return [v for v in verdict.violations if v.rule == "render" and v.lane == PRODUCTION]


@pytest.mark.parametrize(("dtype", "spelled"), [("nvfp4", "nvfp4"), ("fp8_e5m2", "fp8_e5m2")])
def test_a_kv_dtype_the_deepseek_v4_path_refuses_denies_the_production_lane(dtype: str, spelled: str) -> None:
    state = with_lane(example_state(), PRODUCTION, kv_cache_dtype=dtype)
    (found,) = _render_findings(state)
    assert found.severity == "deny"
    assert found.message.startswith("state/lanes/dsv41-flash-1017-4x-sglang.yaml: kv_cache_dtype: ")
    assert f"refuses --kv-cache-dtype {spelled} at start" in found.message
    assert "kv_cache_dtype takes fp8_e4m3 (or fp8), bfloat16 (or bf16) or auto" in found.message


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8", "bf16", "bfloat16", "auto"])
def test_what_the_deepseek_v4_path_takes_renders(dtype: str) -> None:
    assert _render_findings(with_lane(example_state(), PRODUCTION, kv_cache_dtype=dtype)) == []


def test_a_model_without_deepseek_v4s_compression_keeps_every_sglang_dtype() -> None:
    state = example_state()
    model = state.models["deepseek-v4.1-flash-1017"]
    plain = model.model_copy(update={"architecture": model.architecture.model_copy(update={"compress_ratios": None})})
    models = {**state.models, "deepseek-v4.1-flash-1017": plain}
    bare = replace(state, models=models)
    assert _render_findings(with_lane(bare, PRODUCTION, kv_cache_dtype="nvfp4")) == []
