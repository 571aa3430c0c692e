"""How fast the bench client takes in a token stream: tokens per second on one core.

The client must never be what limits a measurement: at least 5,000 streamed
tokens per second on one core (a GB10 lane streams tens to a few hundred per
request). Three figures, each on one core (the client is one asyncio thread):

1. parser only: `SSEParser.feed` over recorded vLLM-style SSE bytes, one
   event per network read (the worst case: no batching of chunks);
2. client over httpx with recorded bytes (`httpx.MockTransport`): the parser
   plus httpx's per-chunk machinery, no socket;
3. client against a real stand-in process on 127.0.0.1 streaming as fast as
   it can (STANDIN_TG_TPS=1e9): tokens per CPU-second of this process (the
   stand-in runs in its own process; on a shared machine it is usually the
   slower side, so the wall-clock rate is printed too).

    .venv/bin/python bench/harness_parse_speed.py [--tokens N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reconciler.bench.client import BenchClient, RequestRecord, SSEParser  # noqa: E402
from reconciler.bench.prompts import Prompt  # noqa: E402
from reconciler.errors import TransientError  # noqa: E402

GOAL = 5000.0
WORDS = ("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit")


def recorded_events(tokens: int) -> list[bytes]:
    """SSE events as vLLM streams /v1/completions, with the final usage chunk and [DONE]."""
    base = {"id": "cmpl-0123456789abcdef", "created": 1761200000, "model": "deepseek-v4.1-flash"}
    out = []
    for i in range(tokens):
        piece = {
            **base,
            "object": "text_completion",
            "choices": [
                {
                    "index": 0,
                    "text": " " + WORDS[i % len(WORDS)],
                    "logprobs": None,
                    "finish_reason": "length" if i == tokens - 1 else None,
                    "stop_reason": None,
                }
            ],
            "usage": None,
        }
        out.append(b"data: " + json.dumps(piece).encode() + b"\n\n")
    usage = {"prompt_tokens": 8, "completion_tokens": tokens, "total_tokens": tokens + 8}
    out.append(b"data: " + json.dumps({**base, "object": "text_completion", "choices": [], "usage": usage}).encode())
    out[-1] += b"\n\n"
    out.append(b"data: [DONE]\n\n")
    return out


def parser_only(events: list[bytes], tokens: int) -> float:
    record = RequestRecord(t_send=0.0)
    parser = SSEParser(record)
    start = time.process_time()
    for i, event in enumerate(events):
        parser.feed(event, float(i))
    spent = time.process_time() - start
    if record.tokens != tokens or len(record.chunk_times) != tokens:
        raise SystemExit(f"the parser lost tokens: {len(record.chunk_times)} chunks, {record.tokens} tokens")
    return tokens / spent


async def over_mock(events: list[bytes], tokens: int) -> float:
    class Events(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            for event in events:
                yield event

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Events())

    async with BenchClient("http://bench.invalid", "deepseek-v4.1-flash", transport=httpx.MockTransport(handler)) as c:
        start = time.process_time()
        record = await c.stream(Prompt("", "hello", 1), tokens)
        spent = time.process_time() - start
    _check(record, tokens)
    return tokens / spent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _check(record: RequestRecord, tokens: int) -> None:
    if record.error is not None or record.tokens != tokens:
        raise SystemExit(f"stream failed: {record.error or f'{record.tokens} of {tokens} tokens'}")


def start_standin(port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "STANDIN_TG_TPS": "1e9", "STANDIN_PP_TPS": "1e9"}
    argv = [sys.executable, "-m", "reconciler.sim.standin", "--bind", "127.0.0.1", "--"]
    argv += ["vllm", "serve", "m", "--port", str(port), "--served-model-name", "m"]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def over_socket(port: int, tokens: int) -> tuple[float, float]:
    async with BenchClient(f"http://127.0.0.1:{port}", "m") as c:
        deadline = time.monotonic() + 20
        while True:
            try:
                await c.served_models()
                break
            except TransientError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)
        await c.stream(Prompt("", "warm up", 2), 16)
        cpu, wall = time.process_time(), time.perf_counter()
        record = await c.stream(Prompt("", "hello", 1), tokens)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    _check(record, tokens)
    return tokens / cpu, tokens / wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=20000)
    args = parser.parse_args()
    events = recorded_events(args.tokens)
    only = parser_only(events, args.tokens)
    mock = asyncio.run(over_mock(events, args.tokens))
    port = free_port()
    proc = start_standin(port)
    try:
        cpu_rate, wall_rate = asyncio.run(over_socket(port, args.tokens))
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"tokens per stream: {args.tokens}, one SSE event per read; goal >= {GOAL:,.0f} tokens/s on one core")
    print(f"parser only (recorded bytes):           {only:>10,.0f} tokens/s (CPU)")
    print(f"client over httpx, recorded bytes:      {mock:>10,.0f} tokens/s (CPU)")
    print(f"client vs stand-in on 127.0.0.1:        {cpu_rate:>10,.0f} tokens/s (client CPU)")
    print(f"{'':40}{wall_rate:>10,.0f} tokens/s (wall clock; the stand-in is the limit)")
    worst = min(only, mock, cpu_rate)
    print(f"{'PASS' if worst >= GOAL else 'FAIL'}: slowest client figure {worst:,.0f} tokens/s")
    return 0 if worst >= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
