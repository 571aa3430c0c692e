"""FLARE and generic golden argv."""

from __future__ import annotations

import pytest

from reconciler.engines import start_groups

from .conftest import COMMIT, MODEL_PATH, LaneFactory, Renderer
from .golden import assert_golden

pytestmark = pytest.mark.timeout(30)

NET_ENV = [
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
]


def _docker(engine: str, rank: int, spec_hash: str, env: list[str]) -> list[str]:
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
        f"lanes.engine={engine}",
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


def _flare_command(rank: int) -> list[str]:
    return [
        "serve",
        "--model",
        MODEL_PATH,
        "--served-model-name",
        "dsv41-flash",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--tp",
        "4",
        "--max-model-len",
        "131072",
        "--max-num-seqs",
        "8",
        "--gpu-memory-utilization",
        "0.8",
        "--kv-cache-dtype",
        "fp8",
        "--rank",
        str(rank),
        "--hosts",
        "10.20.0.11,10.20.0.12,10.20.0.13,10.20.0.14",
        "--trust-remote-code",
        "--chat-template",
        "a;b $(id)",
    ]


def test_flare_rank0_and_rank2_golden(make_lane: LaneFactory, render: Renderer) -> None:
    specs = render(make_lane(engine="flare"))
    assert_golden("flare-4x", specs)
    assert start_groups(make_lane(engine="flare")) == [(0, 1, 2, 3)]
    assert [s.serves_http for s in specs] == [True, False, False, False]


def test_generic_rank0_and_rank2_golden(make_lane: LaneFactory, render: Renderer) -> None:
    args = ["llama-server", "--model", MODEL_PATH, "--port", "8000", "--alias", "x; rm -rf /"]
    assert_golden("generic-4x", render(make_lane(engine="generic", args=args)))
