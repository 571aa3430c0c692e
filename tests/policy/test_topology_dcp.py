"""The topology rule denies what vLLM refuses at start: dcp on a model with sliding-window layers."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.policy import Violation, evaluate

from .builders import gqa, host, lane, mla, model, only_rules, repo_policies, state

pytestmark = pytest.mark.timeout(30)

SWA = gqa(num_heads=32, kv_heads=8, layers=4, sliding_window=256, sliding_window_layers=3)
DSV4 = mla(layers=4, kv_lora_rank=448, kv_slot_bytes=584, compress_ratios=(1.0, 4.0, 128.0, 1.0), sliding_window=128)


def topology(arch: Any, **fields: Any) -> list[Violation]:
    hosts = [f"h{i}" for i in range(4)]
    desired = state([host(h) for h in hosts], [model("m", arch=arch)], [lane("l", "m", hosts, tp=4, **fields)])
    return [v for v in evaluate(desired, only_rules(repo_policies(), "topology")).violations if v.rule == "topology"]


@pytest.mark.parametrize("arch", [SWA, DSV4], ids=["interleaved-swa", "dsv4"])
def test_vllm_dcp_with_sliding_windows_is_denied(arch: Any) -> None:
    [v] = topology(arch, dcp=2)
    assert v.severity == "deny"
    assert "dcp 2" in v.message
    assert "kv_cache_interface.py" in v.message
    assert v.detail["refusal"] == "dcp-sliding-window"


def test_stopped_lane_is_warned() -> None:
    [v] = topology(SWA, dcp=2, desired="stopped")
    assert v.severity == "warn"
    assert v.detail["would_deny"] is True


@pytest.mark.parametrize(
    ("arch", "fields"),
    [
        (SWA, {"dcp": 1}),
        (SWA, {"dcp": 2, "engine": "sglang"}),
        (gqa(num_heads=32, kv_heads=8, layers=4), {"dcp": 2}),
    ],
    ids=["no-dcp", "sglang", "no-sliding-layers"],
)
def test_no_refusal(arch: Any, fields: dict[str, Any]) -> None:
    assert topology(arch, **fields) == []
