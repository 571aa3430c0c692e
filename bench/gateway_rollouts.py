"""What a client sees of each rollout through the gateway, and what the gateway costs against a direct engine.

On the simulated Sparks with a real SMG (smg 1.13.0) in front, driven by a real `lanes daemon` (`[gateway]
enabled`), as tests/daemon/test_rollouts.py sets them up. A client sends one chat completion after another
(2 output tokens) during each change, and counts what it got:

- in place (a new image on the same hosts, its stand-in loading for `--load-s`);
- blue/green (the nightly lane moved to dgx1-3, freed by stopping the production lane; a 4 s watch window);
- an abort (blue/green onto a build slow to its first token: the watch window sends the traffic back).

Then `--clients` concurrent clients each stream `--requests` completions of `--tokens` tokens to the head
engine directly and through the gateway, in turn, and the throughput (output tokens per second, all clients)
and the median time to first token are compared. The stand-in paces its tokens (2,000 prompt and 50 output
tokens per second), so the difference is the gateway's own.

    .venv/bin/python bench/gateway_rollouts.py [--clients 4] [--requests 20] [--tokens 32] [--json]

About 2 minutes. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo's own example-state helpers in tests/

from tests.support.example import EUGR, EUGR_REPO, PRODUCTION
from tests.support.rollouts import (
    MODEL,
    NEW_HOSTS,
    Stream,
    commit,
    gateway_world,
    production_stopped,
    streaming,
    until_served,
)
from tests.support.smggateway import Gateway
from tests.support.waiting import wait_for
from tests.support.world import World

SALT = 247


async def _world(tmp: Path, gateway: Gateway) -> Any:
    ctx = gateway_world(tmp, SALT, gateway, owner="lanes-bench")
    world: World = await ctx.__aenter__()
    return ctx, world


def _said(name: str, stream: Stream, seconds: float) -> dict[str, Any]:
    statuses = stream.statuses()
    retry = [int(after) for status, after, _ in stream.answers if status == 503 and after is not None]
    return {
        "strategy": name,
        "requests": len(stream.answers),
        "ok": statuses.get(200, 0),
        "503_retry_after": len(retry),
        "other": sum(n for status, n in statuses.items() if status not in (200, 503)),
        "longest_gap_s": round(stream.longest_gap(), 2),
        "change_s": round(seconds, 1),
        "retry_after_first_s": retry[0] if retry else None,
    }


async def strategies(tmp: Path, load_s: float) -> list[dict[str, Any]]:
    gateway = Gateway(tmp)
    gateway.start()
    out = []
    try:
        ctx, world = await _world(tmp / "world", gateway)
        try:
            await until_served(gateway, "the model served")
            image = world.fleet.registry.add(f"{EUGR_REPO}:bench-load", env={"STANDIN_LOAD_S": str(load_s)}).pinned
            async with streaming(gateway) as stream:
                await asyncio.sleep(1.0)
                t0 = time.monotonic()
                head = commit(world, gateway, "in place", "", **{EUGR: {"image": image}})
                await wait_for(lambda: world.outcome(head) == "applied", 180, "in place applied")
                took = time.monotonic() - t0
                await until_served(gateway, "served again")
                await asyncio.sleep(1.0)
            out.append(_said("in place", stream, took))

            await production_stopped(world, gateway)
            async with streaming(gateway) as stream:
                await asyncio.sleep(1.0)
                t0 = time.monotonic()
                moved = {PRODUCTION: {"desired": "stopped"}, EUGR: {"hosts": list(NEW_HOSTS), "image": image}}
                head = commit(world, gateway, "blue/green", "  analysis:\n    watch_s: 4\n", **moved)
                await wait_for(lambda: world.outcome(head) == "applied", 180, "blue/green applied")
                took = time.monotonic() - t0
                await asyncio.sleep(1.0)
            out.append(_said("blue/green", stream, took))

            slow = world.fleet.registry.add(f"{EUGR_REPO}:bench-slow", env={"STANDIN_PP_TPS": "2"}).pinned
            back = {PRODUCTION: {"desired": "stopped"}, EUGR: {"hosts": ["dgx5", "dgx6", "dgx7"], "image": slow}}
            lines = f"  lanes:\n    {EUGR}:\n      watch_s: 30\n      max_ttft_s: 0.3\n"
            async with streaming(gateway) as stream:
                await asyncio.sleep(1.0)
                t0 = time.monotonic()
                head = commit(world, gateway, "blue/green, aborted", lines, **back)
                await wait_for(lambda: world.outcome(head) not in (None, "applying"), 180, "the abort")
                took = time.monotonic() - t0
                await asyncio.sleep(1.0)
            out.append(_said(f"blue/green aborted ({world.outcome(head)})", stream, took))
            return out
        finally:
            await ctx.__aexit__(None, None, None)
    finally:
        gateway.kill()


async def _client(url: str, requests: int, tokens: int, ttfts: list[float]) -> int:
    body = {"model": MODEL, "prompt": "Say hello", "max_tokens": tokens, "stream": True}
    got = 0
    async with httpx.AsyncClient(trust_env=False, timeout=60) as client:
        for _ in range(requests):
            sent = time.monotonic()
            first = True
            async with client.stream("POST", url + "/v1/completions", json=body) as r:
                r.raise_for_status()
                async for line in r.aiter_lines():
                    if not line.startswith("data:") or line.strip() == "data: [DONE]":
                        continue
                    chunk = json.loads(line[5:])
                    if any(c.get("text") for c in chunk.get("choices", [])):
                        if first:
                            ttfts.append(time.monotonic() - sent)
                            first = False
                        got += 1
    return got


async def overhead(tmp: Path, clients: int, requests: int, tokens: int) -> dict[str, Any]:
    gateway = Gateway(tmp)
    gateway.start()
    try:
        ctx, world = await _world(tmp / "world", gateway)
        try:
            await until_served(gateway, "the model served")
            head = world.state.lanes[EUGR].hosts[0]
            direct = f"http://{world.fleet.addresses[head]}:{world.state.lanes[EUGR].port}"
            out: dict[str, Any] = {"clients": clients, "requests": requests, "tokens": tokens}
            for name, url in (("direct", direct), ("gateway", gateway.url), ("direct again", direct)):
                ttfts: list[float] = []
                t0 = time.monotonic()
                counts = await asyncio.gather(*(_client(url, requests, tokens, ttfts) for _ in range(clients)))
                seconds = time.monotonic() - t0
                out[name] = {
                    "tokens_per_s": round(sum(counts) / seconds, 1),
                    "ttft_median_ms": round(statistics.median(ttfts) * 1000, 1),
                }
            return out
        finally:
            await ctx.__aexit__(None, None, None)
    finally:
        gateway.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--load-s", type=float, default=6.0, help="the in-place build's load time (stand-in)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lanes-bench-gw-") as tmp:
        for sub in ("s", "o"):
            (Path(tmp) / sub).mkdir()
        rows = asyncio.run(strategies(Path(tmp) / "s", args.load_s))
        cost = asyncio.run(overhead(Path(tmp) / "o", args.clients, args.requests, args.tokens))
    if args.json:
        print(json.dumps({"strategies": rows, "overhead": cost, "load": os.getloadavg()[0]}, indent=2))
        return
    print(f"{'strategy':<34} {'requests':>8} {'200':>6} {'503+RA':>7} {'other':>6} {'gap s':>7} {'change s':>9}")
    for r in rows:
        print(
            f"{r['strategy']:<34} {r['requests']:>8} {r['ok']:>6} {r['503_retry_after']:>7} {r['other']:>6} "
            f"{r['longest_gap_s']:>7} {r['change_s']:>9}"
        )
    d, g = cost["direct"], cost["gateway"]
    print(
        f"gateway vs direct ({cost['clients']} clients x {cost['requests']} requests x {cost['tokens']} tokens): "
        f"{g['tokens_per_s']} vs {d['tokens_per_s']} tokens/s ({g['tokens_per_s'] / d['tokens_per_s'] - 1:+.1%}), "
        f"TTFT median {g['ttft_median_ms']} vs {d['ttft_median_ms']} ms; direct again "
        f"{cost['direct again']['tokens_per_s']} tokens/s; load {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
