"""vLLM golden argv: Ray (head runs ray and serve, workers join) and native (--nnodes/--headless)."""

from __future__ import annotations

import pytest

from reconciler.engines import start_groups
from reconciler.engines.vllm import RAY_HEAD_SCRIPT

from .conftest import COMMIT, MODEL_PATH, LaneFactory, Renderer
from .golden import assert_golden

pytestmark = pytest.mark.timeout(30)

SERVE = [
    "serve",
    MODEL_PATH,
    "--served-model-name",
    "dsv41-flash",
    "--host",
    "0.0.0.0",
    "--port",
    "8000",
    "--tensor-parallel-size",
    "4",
    "--enable-expert-parallel",
    "--max-model-len",
    "131072",
    "--max-num-seqs",
    "8",
    "--kv-cache-dtype",
    "fp8",
    "--gpu-memory-utilization",
    "0.8",
]
LANE_ARGS = ["--trust-remote-code", "--chat-template", "a;b $(id)"]


def _docker(rank: int, spec_hash: str, env: list[str]) -> list[str]:
    name = f"lanes-golden-r{rank}"
    return [
        "docker",
        "run",
        "-d",
        "--name",
        name,
        "--restart",
        "no",
        "--gpus",
        "all",
        "--network",
        "host",
        "--ipc",
        "host",
        "--label",
        f"lanes.commit={COMMIT}",
        "--label",
        "lanes.engine=vllm",
        "--label",
        "lanes.lane=golden",
        "--label",
        "lanes.managed=true",
        "--label",
        "lanes.port=8000",
        "--label",
        f"lanes.rank={rank}",
        "--label",
        f"lanes.spec={spec_hash}",
        *env,
        "--env-file",
        f"/var/lib/lanes/env/{name}.env",
        "-v",
        "/root/.cache/huggingface:/root/.cache/huggingface",
        "-v",
        f"{MODEL_PATH}:{MODEL_PATH}:ro",
    ]


def _native_env(address: str) -> list[str]:
    return [
        "-e",
        "FOO=bar",
        "-e",
        "GLOO_SOCKET_IFNAME=enp1s0f0np0",
        "-e",
        "HF_HOME=/root/.cache/huggingface",
        "-e",
        "NCCL_IB_DISABLE=0",
        "-e",
        "NCCL_SOCKET_IFNAME=enp1s0f0np0",
        "-e",
        f"VLLM_HOST_IP={address}",
    ]


def _ray_env(address: str) -> list[str]:
    return [
        "-e",
        "FOO=bar",
        "-e",
        "GLOO_SOCKET_IFNAME=enp1s0f0np0",
        "-e",
        "HF_HOME=/root/.cache/huggingface",
        "-e",
        "NCCL_IB_DISABLE=0",
        "-e",
        "NCCL_SOCKET_IFNAME=enp1s0f0np0",
        "-e",
        "RAY_memory_monitor_refresh_ms=0",
        "-e",
        "TP_SOCKET_IFNAME=enp1s0f0np0",
        "-e",
        "UCX_NET_DEVICES=enp1s0f0np0",
        "-e",
        f"VLLM_HOST_IP={address}",
    ]


def test_native_rank0_and_rank2_golden(make_lane: LaneFactory, render: Renderer) -> None:
    assert_golden("vllm-native-4x", render(make_lane(engine="vllm", launcher="native", ep=4)))


def test_ray_rank0_and_rank2_golden(make_lane: LaneFactory, render: Renderer) -> None:
    assert_golden("vllm-ray-4x", render(make_lane(engine="vllm", launcher="ray", ep=4)))


def test_ray_head_script_holds_no_lane_field(make_lane: LaneFactory, render: Renderer) -> None:
    """The one shell script is a constant: lane fields reach it as positional parameters only."""
    head = render(make_lane(engine="vllm", launcher="ray"))[0]
    script = head.command[1]
    assert script == RAY_HEAD_SCRIPT
    for value in ("10.20.0.11", "6379", MODEL_PATH, "dsv41-flash", "golden"):
        assert value not in script
    assert script.endswith('exec "$@"')


def test_start_groups(make_lane: LaneFactory) -> None:
    assert start_groups(make_lane(engine="vllm", launcher="ray")) == [(0,), (1, 2, 3)]
    assert start_groups(make_lane(engine="vllm", launcher="native")) == [(0, 1, 2, 3)]
    assert start_groups(make_lane(engine="vllm", launcher="ray", hosts=["dgx1"], tp=1)) == [(0,)]
    assert start_groups(make_lane(engine="vllm", launcher="native", hosts=["dgx1"], tp=1)) == [(0,)]


@pytest.mark.parametrize("launcher", ["ray", "native"])
def test_single_rank_is_a_plain_serve(make_lane: LaneFactory, render: Renderer, launcher: str) -> None:
    (spec,) = render(make_lane(engine="vllm", launcher=launcher, hosts=["dgx5"], tp=1))
    assert spec.entrypoint == "vllm"
    assert spec.command[:2] == ("serve", MODEL_PATH)
    for flag in ("--nnodes", "--headless", "--distributed-executor-backend"):
        assert flag not in spec.command
    assert "VLLM_HOST_IP" not in spec.env_map


def test_pp_dcp_and_kv_spelling(make_lane: LaneFactory, render: Renderer) -> None:
    command = render(make_lane(engine="vllm", tp=2, pp=2, dcp=2, kv_cache_dtype="bf16"))[0].command
    assert command[command.index("--pipeline-parallel-size") + 1] == "2"
    assert command[command.index("--decode-context-parallel-size") + 1] == "2"
    assert command[command.index("--kv-cache-dtype") + 1] == "bfloat16"
    assert "--enable-expert-parallel" not in command
    auto = render(make_lane(engine="vllm", kv_cache_dtype="auto"))[0].command
    assert "--kv-cache-dtype" not in auto
