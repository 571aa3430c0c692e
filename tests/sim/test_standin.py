"""The engine stand-in as a real process: load stages, endpoints, streaming, pacing, failure switches."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from reconciler.sim.engineargs import Behaviour, scan_engine_argv
from reconciler.sim.standin_http import schedule
from tests.support.waiting import wait_for

from .conftest import Eventually, Spawn

pytestmark = pytest.mark.timeout(60)


def _url(port: int, path: str) -> str:
    return f"http://127.0.0.1:{port}{path}"


async def _answers(client: httpx.AsyncClient, port: int) -> bool:
    try:
        await client.get(_url(port, "/health"))
    except httpx.TransportError:
        return False
    return True


async def _stream(
    client: httpx.AsyncClient, port: int, body: dict[str, Any], path: str
) -> tuple[list[Any], float, float]:
    """Events of one streamed request, the time to the first content token and the total time."""
    events: list[Any] = []
    start = time.monotonic()
    first = 0.0
    async with client.stream("POST", _url(port, path), json={**body, "stream": True}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            payload = line.removeprefix("data: ")
            event = payload if payload == "[DONE]" else json.loads(payload)
            if not first and isinstance(event, dict) and event["choices"]:
                choice = event["choices"][0]
                if choice.get("text") or choice.get("delta", {}).get("content"):
                    first = time.monotonic() - start
            events.append(event)
    return events, first, time.monotonic() - start


@pytest.mark.parametrize(
    ("argv", "port", "served", "max_len"),
    [
        (
            [
                "vllm",
                "serve",
                "/models/Qwen3",
                "--port",
                "8001",
                "--served-model-name",
                "qwen3",
                "--max-model-len",
                "32768",
            ],
            8001,
            "qwen3",
            32768,
        ),
        (
            [
                "python3",
                "-m",
                "sglang.launch_server",
                "--model-path",
                "/m/dsv41",
                "--host",
                "0.0.0.0",
                "--port=30000",
                "--context-length",
                "65536",
                "--tp",
                "4",
            ],
            30000,
            "/m/dsv41",
            65536,
        ),
        (["serve", "--model", "m", "--unknown-flag", "--port"], 8000, "m", 8192),
        ([], 8000, "default", 8192),
    ],
)
def test_scan_engine_argv(argv: list[str], port: int, served: str, max_len: int) -> None:
    args = scan_engine_argv(argv)
    assert (args.port, args.served_name, args.max_model_len) == (port, served, max_len)


def test_behaviour_from_env() -> None:
    b = Behaviour.from_env({"STANDIN_LOAD_S": "2.5", "STANDIN_NEVER_HEALTHY": "1", "STANDIN_TG_TPS": "bad"})
    assert (b.load_s, b.never_healthy, b.tg_tps, b.crash_after_s, b.wrong_model) == (
        2.5,
        True,
        50.0,
        None,
        False,
    )


async def test_loads_then_serves(spawn: Spawn, port: int, eventually: Eventually) -> None:
    proc = spawn(
        "--bind",
        "127.0.0.1",
        "vllm",
        "serve",
        "/m/q",
        "--port",
        str(port),
        "--served-model-name",
        "q",
        # A load long enough that the first answers come before it ends even on a loaded machine (the load's
        # clock starts when the process does: at 0.8 s, a slow interpreter start once answered healthy at once,
        # and at 4 s a start at a load of 8 on two cores did). It costs nothing: healthy ends the wait below.
        env={"STANDIN_LOAD_S": "12", "STANDIN_VERSION": "0.32.0"},
    )
    async with httpx.AsyncClient(timeout=5) as client:
        await eventually(lambda: _answers(client, port), 10)
        # The port listens before the model is loaded, as with real engines.
        assert (await client.get(_url(port, "/health"))).status_code == 503
        assert (await client.get(_url(port, "/v1/models"))).json() == {"object": "list", "data": []}
        early = await client.post(_url(port, "/v1/completions"), json={"prompt": "hi", "max_tokens": 1})
        assert early.status_code == 503

        async def healthy() -> bool:
            return (await client.get(_url(port, "/health"))).status_code == 200

        await eventually(healthy, 20)
        models = (await client.get(_url(port, "/v1/models"))).json()
        assert [(m["id"], m["object"]) for m in models["data"]] == [("q", "model")]
        assert (await client.get(_url(port, "/version"))).json() == {"version": "0.32.0"}
        done = await client.post(_url(port, "/v1/completions"), json={"model": "q", "prompt": "a b c", "max_tokens": 4})
        body = done.json()
        assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
        assert len(body["choices"][0]["text"].split()) == 4
        metrics = (await client.get(_url(port, "/metrics"))).text
        assert 'vllm:prompt_tokens_total{model_name="q"} 3.0' in metrics
        assert 'vllm:generation_tokens_total{model_name="q"} 4.0' in metrics
        assert 'vllm:num_requests_running{model_name="q"} 0.0' in metrics
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(5) == 0


async def test_streaming_chat_with_usage(spawn: Spawn, port: int, eventually: Eventually) -> None:
    spawn("--bind", "127.0.0.1", "--", "vllm", "serve", "m", "--port", str(port))
    async with httpx.AsyncClient(timeout=5) as client:
        await eventually(lambda: _answers(client, port), 5)
        body = {
            "model": "m",
            "messages": [
                {"role": "user", "content": "one two three"},
                {"role": "user", "content": [{"type": "text", "text": "four five"}]},
            ],
            "max_tokens": 5,
            "stream_options": {"include_usage": True},
        }
        events, _, _ = await _stream(client, port, body, "/v1/chat/completions")
        assert events[-1] == "[DONE]"
        usage = events[-2]
        assert usage["choices"] == []
        assert usage["usage"] == {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}
        assert events[0]["choices"][0]["delta"]["role"] == "assistant"
        content = [e["choices"][0]["delta"]["content"] for e in events[1:-2]]
        assert len(content) == 5
        assert events[-3]["choices"][0]["finish_reason"] == "length"
        assert {e["object"] for e in events[:-1]} == {"chat.completion.chunk"}
        # Without include_usage there is no usage chunk.
        plain, _, _ = await _stream(client, port, {"prompt": "x", "max_tokens": 2}, "/v1/completions")
        assert len(plain) == 3
        assert all("usage" not in e for e in plain[:-1])


def test_the_schedule_follows_prompt_and_generation_rates_and_the_slowdown() -> None:
    # 30 prompt tokens at 100 tokens/s, then one token every 5 ms; three times as slow, every 15 ms.
    assert schedule(Behaviour(pp_tps=100, tg_tps=200), 30, 40) == pytest.approx([0.3 + i * 0.005 for i in range(40)])
    assert schedule(Behaviour(tg_tps=200, slowdown=3), 0, 21) == pytest.approx([i * 0.015 for i in range(21)])
    assert schedule(Behaviour(), 10, 0) == []


async def test_no_token_is_sent_before_its_time(spawn: Spawn, port: int, eventually: Eventually) -> None:
    """Pacing by absolute deadlines: a stream never arrives early (how late it is depends on the machine)."""
    spawn(
        "--bind",
        "127.0.0.1",
        "vllm",
        "serve",
        "m",
        "--port",
        str(port),
        env={"STANDIN_TG_TPS": "200", "STANDIN_PP_TPS": "100"},
    )
    async with httpx.AsyncClient(timeout=10) as client:
        await eventually(lambda: _answers(client, port), 5)
        events, _, total = await _stream(client, port, {"prompt": "", "max_tokens": 40}, "/v1/completions")
        assert len(events) == 41 and total >= 39 * 0.005  # 39 gaps of 5 ms at least
        _, ttft, _ = await _stream(client, port, {"prompt": " ".join(["w"] * 30), "max_tokens": 1}, "/v1/completions")
        assert ttft >= 30 / 100  # 30 prompt tokens at 100 tokens/s


async def test_each_request_is_paced_on_its_own(spawn: Spawn, port: int, eventually: Eventually) -> None:
    """A short request is answered in full while a long one streams: they do not wait for each other."""
    spawn("--bind", "127.0.0.1", "serve", "m", "--port", str(port), env={"STANDIN_TG_TPS": "100"})
    async with httpx.AsyncClient(timeout=30) as client:
        await eventually(lambda: _answers(client, port), 5)
        long = {"prompt": "", "max_tokens": 6000, "stream": True}  # a minute of tokens at 100 tokens/s
        async with client.stream("POST", _url(port, "/v1/completions"), json=long) as streaming:
            lines = streaming.aiter_lines()
            assert (await anext(lines)).startswith("data: ")  # the long one is under way
            # Served one at a time, the short one would wait the minute out: 30 s only guards against that.
            short = _stream(client, port, {"prompt": "", "max_tokens": 3}, "/v1/completions")
            events, _, _ = await asyncio.wait_for(short, 30)
            assert len(events) == 4 and events[-1] == "[DONE]"
            assert not streaming.is_closed  # the long one is still streaming


async def test_slowdown_is_read_from_the_environment(spawn: Spawn, port: int, eventually: Eventually) -> None:
    spawn(
        "--bind",
        "127.0.0.1",
        "serve",
        "m",
        "--port",
        str(port),
        env={"STANDIN_TG_TPS": "200", "STANDIN_SLOWDOWN": "3"},
    )
    async with httpx.AsyncClient(timeout=10) as client:
        await eventually(lambda: _answers(client, port), 5)
        _, _, total = await _stream(client, port, {"prompt": "", "max_tokens": 21}, "/v1/completions")
        assert total >= 20 * 0.015  # 20 gaps of 15 ms at least: 3 x 5 ms


async def test_never_healthy(spawn: Spawn, port: int, eventually: Eventually) -> None:
    spawn("--bind", "127.0.0.1", "serve", "m", "--port", str(port), env={"STANDIN_NEVER_HEALTHY": "1"})
    async with httpx.AsyncClient(timeout=5) as client:
        await eventually(lambda: _answers(client, port), 5)
        await asyncio.sleep(0.3)
        assert (await client.get(_url(port, "/health"))).status_code == 503
        assert (await client.get(_url(port, "/v1/models"))).json()["data"] == []


async def test_wrong_model(spawn: Spawn, port: int, eventually: Eventually) -> None:
    spawn("--bind", "127.0.0.1", "serve", "m", "--port", str(port), env={"STANDIN_WRONG_MODEL": "1"})
    async with httpx.AsyncClient(timeout=5) as client:
        await eventually(lambda: _answers(client, port), 5)
        ids = [m["id"] for m in (await client.get(_url(port, "/v1/models"))).json()["data"]]
        assert ids
        assert "m" not in ids
        missing = await client.post(_url(port, "/v1/completions"), json={"model": "m", "prompt": "x"})
        assert missing.status_code == 404
        assert missing.json()["type"] == "NotFoundError"


async def test_bad_requests(spawn: Spawn, port: int, eventually: Eventually) -> None:
    spawn("--bind", "127.0.0.1", "serve", "m", "--port", str(port))
    async with httpx.AsyncClient(timeout=5) as client:
        await eventually(lambda: _answers(client, port), 5)
        bad = await client.post(_url(port, "/v1/completions"), content=b"{nope")
        assert bad.status_code == 400
        negative = await client.post(_url(port, "/v1/completions"), json={"prompt": "x", "max_tokens": -1})
        assert negative.status_code == 400
        assert (await client.get(_url(port, "/nope"))).status_code == 404


async def test_port_delay(spawn: Spawn, port: int, eventually: Eventually) -> None:
    spawn("--bind", "127.0.0.1", "serve", "m", "--port", str(port), env={"STANDIN_PORT_DELAY_S": "0.6"})
    async with httpx.AsyncClient(timeout=5) as client:
        await asyncio.sleep(0.3)
        assert not await _answers(client, port)
        await eventually(lambda: _answers(client, port), 5)


async def test_crash_after(spawn: Spawn, port: int) -> None:
    proc = spawn("--bind", "127.0.0.1", "serve", "m", "--port", str(port), env={"STANDIN_CRASH_AFTER_S": "0.3"})
    assert proc.wait(5) == 1


def _catches_sigterm(pid: int) -> bool:
    """Whether process `pid` has a handler for SIGTERM (the SigCgt mask in /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


async def test_worker_mode_serves_nothing_and_stops_on_sigterm(spawn: Spawn, port: int) -> None:
    proc = spawn("--bind", "127.0.0.1", "--worker", "vllm", "serve", "m", "--port", str(port))
    # Signalled before it has set its SIGTERM handler (a slow start on a loaded machine), it dies of the signal
    # (-15): wait until the kernel says it catches SIGTERM, then for the half second it would serve in.
    await wait_for(lambda: _catches_sigterm(proc.pid), 20, "the stand-in's SIGTERM handler")
    await asyncio.sleep(0.5)
    assert proc.poll() is None
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(5) == 0  # a worker otherwise sleeps for an hour


async def test_worker_honours_crash_after(spawn: Spawn, port: int) -> None:
    proc = spawn("--worker", "serve", "m", env={"STANDIN_CRASH_AFTER_S": "0.2"})
    assert proc.wait(5) == 1


async def test_sigterm_mid_stream_exits_promptly(spawn: Spawn, port: int, eventually: Eventually) -> None:
    proc = spawn("--bind", "127.0.0.1", "serve", "m", "--port", str(port), env={"STANDIN_TG_TPS": "5"})
    async with httpx.AsyncClient(timeout=10) as client:
        await eventually(lambda: _answers(client, port), 5)
        stream = asyncio.ensure_future(_stream(client, port, {"prompt": "x", "max_tokens": 100}, "/v1/completions"))
        await asyncio.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == 0  # the stream alone would last 20 s
        with pytest.raises(httpx.HTTPError):
            await stream


async def test_port_in_use_exits_1(spawn: Spawn, port: int) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        proc = spawn("--bind", "127.0.0.1", "serve", "m", "--port", str(port))
        assert proc.wait(5) == 1


async def test_exits_when_its_simulator_is_gone(spawn: Spawn, port: int) -> None:
    # STANDIN_PARENT_PID names a parent that is not (or no longer) the parent: as after a killed test run.
    proc = spawn("--bind", "127.0.0.1", "serve", "m", "--port", str(port), env={"STANDIN_PARENT_PID": "1"})
    assert proc.wait(5) == 0
