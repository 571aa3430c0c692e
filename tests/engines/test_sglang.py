"""SGLang golden argv: every rank runs launch_server with --nnodes/--node-rank/--dist-init-addr."""

from __future__ import annotations

import pytest

from reconciler.engines import start_groups
from reconciler.errors import InputError

from .conftest import COMMIT, IMAGE, MODEL_PATH, LaneFactory, Renderer
from .golden import assert_golden

pytestmark = pytest.mark.timeout(30)


def _expected(rank: int, address: str, spec_hash: str) -> list[str]:
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
        "lanes.engine=sglang",
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
        f"SGLANG_HOST_IP={address}",
        "--env-file",
        f"/var/lib/lanes/env/{name}.env",
        "-v",
        "/root/.cache/huggingface:/root/.cache/huggingface",
        "-v",
        f"{MODEL_PATH}:{MODEL_PATH}:ro",
        "--entrypoint",
        "python3",
        IMAGE,
        "-m",
        "sglang.launch_server",
        "--model-path",
        MODEL_PATH,
        "--served-model-name",
        "dsv41-flash",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--tp-size",
        "4",
        "--ep-size",
        "4",
        "--mem-fraction-static",
        "0.8",
        "--context-length",
        "131072",
        "--max-running-requests",
        "8",
        "--kv-cache-dtype",
        "fp8_e4m3",
        "--nnodes",
        "4",
        "--node-rank",
        str(rank),
        "--dist-init-addr",
        "10.20.0.11:29500",
        "--trust-remote-code",
        "--chat-template",
        "a;b $(id)",
    ]


def test_rank0_and_rank2_golden(make_lane: LaneFactory, render: Renderer) -> None:
    specs = render(make_lane(engine="sglang", ep=4))
    assert len(specs) == 4
    assert_golden("sglang-4x", specs)


def test_only_the_head_serves_http(make_lane: LaneFactory, render: Renderer) -> None:
    specs = render(make_lane(engine="sglang"))
    assert [s.serves_http for s in specs] == [True, False, False, False]
    assert start_groups(make_lane(engine="sglang")) == [(0, 1, 2, 3)]


def test_rank_on_a_host_with_its_own_interface(make_lane: LaneFactory, render: Renderer) -> None:
    env = render(make_lane(engine="sglang"))[3].env_map
    assert env["NCCL_SOCKET_IFNAME"] == "enp1s0f1np1"
    assert env["GLOO_SOCKET_IFNAME"] == "enp1s0f1np1"


def test_pp_dcp_and_auto_kv(make_lane: LaneFactory, render: Renderer) -> None:
    command = render(make_lane(engine="sglang", tp=2, pp=2, dcp=2, kv_cache_dtype="auto"))[0].command
    assert command[command.index("--pp-size") + 1] == "2"
    assert command[command.index("--dcp-size") + 1] == "2"
    assert "--kv-cache-dtype" not in command
    assert "--ep-size" not in command


def test_single_rank_has_no_rendezvous(make_lane: LaneFactory, render: Renderer) -> None:
    (spec,) = render(make_lane(engine="sglang", hosts=["dgx1"], tp=1))
    assert "--nnodes" not in spec.command
    assert "--dist-init-addr" not in spec.command
    assert "NCCL_SOCKET_IFNAME" not in spec.env_map
    assert spec.serves_http


@pytest.mark.parametrize("dtype", ["fp16", "float16", "fp8_ds_mla", "nvfp4_ds_mla"])
def test_kv_dtypes_sglang_lacks_are_refused(make_lane: LaneFactory, render: Renderer, dtype: str) -> None:
    with pytest.raises(InputError) as info:
        render(make_lane(engine="sglang", kv_cache_dtype=dtype))
    assert info.value.field == "kv_cache_dtype"
