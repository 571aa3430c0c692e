"""Accuracy of `lanes bench` against the engine stand-in's configured pacing.

Starts a stand-in on 127.0.0.1 with STANDIN_PP_TPS and STANDIN_TG_TPS set,
runs a profile at concurrency 1 and 4, and prints measured / configured for
prompt processing (pp) and token generation (tg), per request (the
stand-in paces every request on its own) and for the batch totals (about
concurrency x the per-request rate). The goal is within 3% per request.

    .venv/bin/python bench/harness_accuracy.py [--pp-tps 2000] [--tg-tps 50] [--pp 2048] [--tg 64]
        [--depth 0] [--repetitions 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reconciler.bench.runner import run_profile  # noqa: E402
from reconciler.spec.bench import BenchProfile  # noqa: E402

GOAL = 0.03


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_standin(port: int, pp_tps: float, tg_tps: float) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "STANDIN_PP_TPS": str(pp_tps), "STANDIN_TG_TPS": str(tg_tps)}
    argv = [sys.executable, "-m", "reconciler.sim.standin", "--bind", "127.0.0.1", "--"]
    argv += ["vllm", "serve", "m", "--port", str(port), "--served-model-name", "m"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.05)
    proc.terminate()
    raise SystemExit("the stand-in did not start")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pp-tps", type=float, default=2000.0)
    parser.add_argument("--tg-tps", type=float, default=50.0)
    parser.add_argument("--pp", type=int, default=2048)
    parser.add_argument("--tg", type=int, default=64)
    parser.add_argument("--depth", type=int, default=0)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--api", choices=("completions", "chat"), default="completions")
    args = parser.parse_args()
    profile = BenchProfile(
        name="accuracy",
        pp=(args.pp,),
        tg=(args.tg,),
        depth=(args.depth,),
        concurrency=(1, 4),
        repetitions=args.repetitions,
        api=args.api,
    )
    port = free_port()
    proc = start_standin(port, args.pp_tps, args.tg_tps)
    try:
        run = asyncio.run(run_profile(profile, url=f"http://127.0.0.1:{port}", model="m"))
    finally:
        proc.terminate()
        proc.wait(10)
    print(
        f"stand-in: STANDIN_PP_TPS={args.pp_tps:g} STANDIN_TG_TPS={args.tg_tps:g}; "
        f"pp{args.pp} tg{args.tg} depth {args.depth}, {args.repetitions} runs, api {args.api}; "
        f"latency {run.latency_s * 1000:.2f} ms; prompt sized to {run.sized_tokens} server tokens"
    )
    print(f"{'c':>2}  {'figure':<18} {'configured':>11} {'measured':>20} {'ratio':>7}")
    worst = 0.0
    for row in run.rows:
        c = row["concurrency"]
        for name, configured, per_request in (
            ("pp_req_throughput", args.pp_tps, True),
            ("tg_req_throughput", args.tg_tps, True),
            ("pp_throughput", args.pp_tps * c, False),
            ("tg_throughput", args.tg_tps * c, False),
        ):
            if c == 1 and not per_request:
                continue  # at concurrency 1 the total is the per-request figure
            m = row[name]
            ratio = m["mean"] / configured
            if per_request:
                worst = max(worst, abs(ratio - 1))
            shown = f"{m['mean']:.1f} ± {m['std']:.1f}"
            print(f"{c:>2}  {name:<18} {configured:>11.1f} {shown:>20} {ratio:>7.4f}")
    verdict = "PASS" if worst <= GOAL else "FAIL"
    print(f"{verdict}: largest per-request deviation {worst:.2%} (goal {GOAL:.0%})")
    return 0 if worst <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
