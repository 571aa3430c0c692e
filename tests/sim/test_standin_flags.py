"""The stand-in judges its command line as its engine release would: argparse's usage and error, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from .conftest import ROOT, Eventually, Spawn

pytestmark = pytest.mark.timeout(60)

VLLM = "0.32.1.dev0+g8244d1c44"  # the eugr lane's build: vLLM 0.32.0's table
SGLANG = "0.0.0.dev1+gda64c5cbb"  # production's build: SGLang 0.5.19's table


def _run(*argv: str, version: str | None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": ROOT}
    if version is not None:
        env["STANDIN_VERSION"] = version
    return subprocess.run(
        [sys.executable, "-m", "reconciler.sim.standin", "--bind", "127.0.0.1", "--", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )


def test_a_misspelled_vllm_flag_ends_the_rank_as_vllm_would() -> None:
    done = _run("vllm", "serve", "/m", "--port", "1", "--kv-cache-dtpye", "fp8", version=VLLM)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("usage: vllm [-h] [-v]")
    assert done.stderr.endswith("vllm: error: unrecognized arguments: --kv-cache-dtpye fp8\n")


def test_a_bad_sglang_choice_ends_a_worker_rank_too() -> None:
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--kv-cache-dtype", "fp4_e3m2"]
    done = subprocess.run(
        [sys.executable, "-m", "reconciler.sim.standin", "--worker", "--", *argv],
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": ROOT, "STANDIN_VERSION": SGLANG},
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("usage: sglang serve [-h] --model-path MODEL_PATH")
    assert (
        "sglang serve: error: argument --kv-cache-dtype: invalid choice: 'fp4_e3m2' (choose from 'auto'" in done.stderr
    )


def test_the_ray_head_is_judged_on_its_vllm_serve_part() -> None:
    script = 'ray start --head && shift 2 && exec "$@"'
    head = ["/bin/sh", "-c", script, "lanes-ray-head", "6379", "10.0.0.1", "vllm", "serve", "/m", "--bogus-flag"]
    done = _run(*head, version="0.26.1rc0+glm53.r39.vllm9e5d1793")
    assert done.returncode == 2
    assert done.stderr.endswith("vllm: error: unrecognized arguments: --bogus-flag\n")


@pytest.mark.parametrize(
    ("version", "extra"),
    [
        (VLLM, ["--kv-cache-dtype", "fp8_ds_mla", "--max_model_len", "4096"]),  # what the release accepts
        ("0.0.0+standin", ["--no-such-flag"]),  # an image that names no release: flags are not judged
        ("9.9.9", ["--no-such-flag"]),  # a release lanes has no table for: not judged either
    ],
)
async def test_a_command_line_that_is_not_refused_serves(
    spawn: Spawn, port: int, eventually: Eventually, version: str, extra: list[str]
) -> None:
    argv = ["vllm", "serve", "/m", "--port", str(port), "--served-model-name", "q", *extra]
    proc = spawn("--bind", "127.0.0.1", *argv, env={"STANDIN_VERSION": version})

    async def answers() -> bool:
        assert proc.poll() is None, "the stand-in exited"
        try:
            async with httpx.AsyncClient(timeout=2) as client:
                await client.get(f"http://127.0.0.1:{port}/health")
        except httpx.TransportError:
            return False
        return True

    await eventually(answers, 10)
