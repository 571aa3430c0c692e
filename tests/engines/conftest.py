"""Lanes built with the spec models directly: a small fleet of four Sparks and one checkpoint."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from reconciler.engines import ContainerSpec, render_lane
from reconciler.spec import Architecture, DataPort, FleetDefaults, Host, Lane, ModelSpec

IMAGE = "registry.example/engine@sha256:" + "a" * 64
COMMIT = "c0ffee0000000000000000000000000000000000"
MODEL_PATH = "/models/DeepSeek-V4.1-Flash-1017"

LaneFactory = Callable[..., Lane]
Renderer = Callable[..., list[ContainerSpec]]


@pytest.fixture
def fleet() -> FleetDefaults:
    return FleetDefaults()


@pytest.fixture
def hosts() -> dict[str, Host]:
    out = {
        f"dgx{i}": Host(name=f"dgx{i}", address=f"10.20.0.{10 + i}", data_plane=(switch_port(i),)) for i in range(1, 8)
    }
    # dgx4 is cabled to the switch from its other CX-7 port.
    out["dgx4"] = Host(
        name="dgx4",
        address="10.20.0.14",
        data_plane=(DataPort(interface="enp1s0f1np1", address="192.168.100.14/24", hca="rocep1s0f1"),),
    )
    return out


def switch_port(i: int) -> DataPort:
    return DataPort(interface="enp1s0f0np0", address=f"192.168.100.{10 + i}/24", hca="rocep1s0f0")


@pytest.fixture
def model() -> ModelSpec:
    return ModelSpec(
        name="dsv41",
        hf_repo="deepseek-ai/DeepSeek-V4.1-Flash-1017",
        path=MODEL_PATH,
        weight_bytes=150_000_000_000,
        architecture=Architecture(layers=43, attention="mla", kv_lora_rank=512, rope_dim=64),
    )


@pytest.fixture
def make_lane() -> LaneFactory:
    def build(**overrides: Any) -> Lane:
        fields: dict[str, Any] = {
            "name": "golden",
            "engine": "sglang",
            "engine_version": "0.5.22",
            "image": IMAGE,
            "model": "dsv41",
            "served_model_name": "dsv41-flash",
            "hosts": ["dgx1", "dgx2", "dgx3", "dgx4"],
            "tp": 4,
            "max_model_len": 131072,
            "max_num_seqs": 8,
            "kv_cache_dtype": "fp8",
            "gpu_memory_utilization": 0.8,
            "port": 8000,
            "args": ["--trust-remote-code", "--chat-template", "a;b $(id)"],
            "env": {"FOO": "bar"},
            "secrets": [{"name": "hf-token", "env": "HF_TOKEN"}],
        }
        fields.update(overrides)
        return Lane.model_validate(fields)

    return build


@pytest.fixture
def render(model: ModelSpec, fleet: FleetDefaults, hosts: Mapping[str, Host]) -> Renderer:
    def run(lane: Lane, commit: str = COMMIT) -> list[ContainerSpec]:
        return render_lane(lane, model, fleet, hosts, commit)

    return run
