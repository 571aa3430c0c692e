"""The SSE parser and the streaming client: what is timed and counted, on recorded bytes."""

from __future__ import annotations

import json
import types
from typing import Any

import httpx
import pytest

from reconciler.bench.client import BenchClient, RequestRecord, SSEParser, api_root
from reconciler.bench.prompts import Prompt
from reconciler.errors import PermanentError, TransientError

from . import fakeengine

pytestmark = pytest.mark.timeout(30)


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def test_events_split_across_reads_and_crlf_lines_are_parsed() -> None:
    record = RequestRecord(t_send=0.0)
    parser = SSEParser(record)
    stream = (
        b": keep-alive comment\r\n\r\n"
        + sse({"choices": [{"index": 0, "text": " a"}]}).replace(b"\n", b"\r\n")
        + sse({"choices": [{"index": 0, "text": " b", "token_ids": [5, 6, 7]}]})
        + sse({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 4}})
        + b"data: [DONE]\n\n"
    )
    for i in range(0, len(stream), 7):  # seven-byte reads split every event somewhere
        parser.feed(stream[i : i + 7], float(i))
    assert parser.done
    assert len(record.chunk_times) == 2 and record.chunk_tokens == [1, 3]
    assert record.prompt_tokens == 12 and record.completion_tokens == 4 and record.tokens == 4
    assert record.t_first_response == record.t_first_token == record.chunk_times[0]


def test_a_chat_role_chunk_is_a_first_response_but_not_a_token() -> None:
    record = RequestRecord(t_send=0.0)
    parser = SSEParser(record)
    parser.feed(sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}), 1.0)
    parser.feed(sse({"choices": [{"index": 0, "delta": {"reasoning_content": "hm"}}]}), 2.0)
    parser.feed(sse({"choices": [{"index": 0, "delta": {"content": "x"}}]}) + b"data: {broken\n\n", 3.0)
    assert record.t_first_response == 1.0 and record.t_first_token == 2.0 and record.t_last_token == 3.0
    assert record.completion_tokens is None and record.tokens == 2  # no usage: the chunks count


@pytest.mark.parametrize("url", ["http://h:8000", "http://h:8000/", "http://h:8000/v1", "http://h:8000/v1/"])
def test_the_endpoint_root_is_the_same_with_or_without_v1(url: str) -> None:
    assert api_root(url) == "http://h:8000"


async def test_stream_records_times_usage_and_sends_usage_and_exact_length() -> None:
    sent: list[dict[str, Any]] = []
    inner = fakeengine.handler()

    def handle(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            sent.append(json.loads(request.content))
        return inner(request)

    async with BenchClient("http://x", fakeengine.MODEL, transport=httpx.MockTransport(handle)) as client:
        record = await client.stream(Prompt("", "one two three", 3), 5)
    assert record.ok and record.tokens == 5 and record.prompt_tokens == 3 + 3
    assert record.t_send <= record.t_first_response <= record.chunk_times[0] <= record.chunk_times[-1] <= record.t_end  # type: ignore[operator]
    body = sent[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 5 and body["ignore_eos"] is True and body["prompt"] == "one two three"


async def test_errors_are_recorded_and_classified() -> None:
    async with BenchClient("http://x", "m", transport=fakeengine.transport(status=503)) as client:
        record = await client.stream(Prompt("", "hi", 1), 2)
        assert not record.ok and record.error is not None and record.error.startswith("HTTP 503")
        with pytest.raises(TransientError, match="HTTP 503"):
            await client.count_prompt_tokens(Prompt("", "hi", 1))
    async with BenchClient("http://x", "m", transport=fakeengine.transport(status=404)) as client:
        with pytest.raises(PermanentError, match="HTTP 404"):
            await client.latency("generation")

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with BenchClient("http://x", "m", transport=httpx.MockTransport(refuse)) as client:
        record = await client.stream(Prompt("", "hi", 1), 2)
        assert record.error is not None and "ConnectError" in record.error
        with pytest.raises(TransientError, match="ConnectError"):
            await client.served_models()
        assert await client.server_version() is None


async def test_latency_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The least of the probes after one discarded, on the client's clock (a fake one here: each
    request takes the time the engine below says, and nothing else moves the clock)."""
    now = [100.0]
    monkeypatch.setattr("reconciler.bench.client.time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    api_s = iter([0.009, 0.005, 0.003])  # the first probe is discarded
    generation_s = iter([0.001, 0.008, 0.006, 0.004, 0.007, 0.005])  # the discarded one is the least
    engine = fakeengine.handler()

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            now[0] += next(api_s)
        else:
            now[0] += next(generation_s)  # before the first chunk, so it is all time to first response
        return engine(request)

    async with BenchClient("http://x", fakeengine.MODEL, transport=httpx.MockTransport(handle)) as client:
        assert await client.latency("none") == 0.0
        assert await client.latency("api", probes=2) == pytest.approx(0.003)
        assert await client.latency("generation") == pytest.approx(0.004)
