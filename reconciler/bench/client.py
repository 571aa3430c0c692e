"""Streaming requests to an OpenAI-compatible endpoint, timed token by token.

One `RequestRecord` per request: when it was sent, when the first response
chunk and the first content token arrived, when each content chunk arrived,
when the stream ended, and the server's own token counts from the final
usage chunk (`stream_options.include_usage`). Generated tokens are thus
known two ways, the usage count and the content chunks, which differ when
an engine sends several tokens per chunk (`rates`). The metrics are computed
elsewhere from these records (`metrics`), so what is measured and what is
derived stay apart.

The SSE parser works on raw bytes from `aiter_raw` with one clock reading
per network read: a benchmark client that spends its time decoding would
measure itself. `bench/harness_parse_speed.py` holds it to well above what
any single lane streams.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from reconciler.bench.prompts import Prompt
from reconciler.cancel import raise_if_cancel_requested
from reconciler.errors import PermanentError, TransientError

Api = Literal["completions", "chat"]
ERROR_BODY_CHARS = 300


@dataclass(slots=True)
class RequestRecord:
    """What one streamed request showed, in `time.perf_counter()` seconds."""

    t_send: float
    t_end: float = 0.0
    t_first_response: float | None = None
    """First chunk with a choice in it (llama-benchy's "first response"; a chat role chunk counts)."""
    chunk_times: list[float] = field(default_factory=list)
    """Arrival of every chunk that carried generated content."""
    chunk_tokens: list[int] = field(default_factory=list)
    """Tokens in each content chunk: len(token_ids) when the server sends them, else 1."""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None
    prefix_tokens: int | None = None
    """Prompt tokens an earlier request of the run sent as this one's prefix (the prefix-cached mode's
    context load, as the server counted them): set by the runner, left out of this request's prefill."""

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.chunk_times)

    @property
    def t_first_token(self) -> float | None:
        return self.chunk_times[0] if self.chunk_times else None

    @property
    def t_last_token(self) -> float | None:
        return self.chunk_times[-1] if self.chunk_times else None

    @property
    def tokens(self) -> int:
        """Generated tokens: the server's usage count, else what the chunks carried."""
        if self.completion_tokens is not None:
            return self.completion_tokens
        return sum(self.chunk_tokens)


class SSEParser:
    """Incremental parser of an OpenAI SSE stream into a `RequestRecord`.

    Feed it raw byte chunks with their arrival time. Only `data:` lines
    matter; comments, `event:` lines and keep-alives are skipped.
    """

    __slots__ = ("_buffer", "done", "record")

    def __init__(self, record: RequestRecord) -> None:
        self.record = record
        self._buffer = b""
        self.done = False

    def feed(self, data: bytes, now: float) -> None:
        buffer = self._buffer + data if self._buffer else data
        start = 0
        find = buffer.find
        while True:
            end = find(b"\n", start)
            if end < 0:
                break
            if buffer.startswith(b"data:", start):
                self._event(buffer[start + 5 : end].strip(), now)
            start = end + 1
        self._buffer = buffer[start:]

    def _event(self, payload: bytes, now: float) -> None:
        if payload == b"[DONE]":
            self.done = True
            return
        if not payload:
            return
        try:
            event = json.loads(payload)
        except ValueError:
            return  # a truncated or non-JSON line: nothing to time
        if not isinstance(event, dict):
            return
        record = self.record
        usage = event.get("usage")
        if isinstance(usage, dict):
            prompt = usage.get("prompt_tokens")
            completion = usage.get("completion_tokens")
            if isinstance(prompt, int):
                record.prompt_tokens = prompt
            if isinstance(completion, int):
                record.completion_tokens = completion
        choices = event.get("choices")
        if not choices or not isinstance(choices, list):
            return
        if record.t_first_response is None:
            record.t_first_response = now
        choice = choices[0]
        if not isinstance(choice, dict):
            return
        if _has_content(choice):
            ids = choice.get("token_ids")
            record.chunk_times.append(now)
            record.chunk_tokens.append(len(ids) if isinstance(ids, list) and ids else 1)


def _has_content(choice: dict[str, Any]) -> bool:
    if choice.get("text"):
        return True
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return bool(
            delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls")
        )
    return False


def api_root(url: str) -> str:
    """`http://h:p`, `http://h:p/` and `http://h:p/v1` all mean the same endpoint root."""
    root = url.rstrip("/")
    return root.removesuffix("/v1")


class BenchClient:
    """An httpx client bound to one endpoint and one served model name."""

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api: Api = "completions",
        timeout_s: float = 900.0,
        max_connections: int = 64,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.root = api_root(url)
        self.model = model
        self.api = api
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._http = httpx.AsyncClient(
            base_url=self.root,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 30.0)),
            limits=limits,
            transport=transport,
            trust_env=False,  # a benchmark goes straight to the lane, never through a proxy from the env
        )

    async def __aenter__(self) -> BenchClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def _body(self, prompt: Prompt, max_tokens: int, *, stream: bool) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            # vLLM and SGLang honour these: exactly max_tokens tokens, so tg is the size asked for.
            "ignore_eos": True,
            "min_tokens": max_tokens,
        }
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if self.api == "chat":
            body["messages"] = prompt.chat_messages()
            return "/v1/chat/completions", body
        body["prompt"] = prompt.completion_text()
        return "/v1/completions", body

    async def stream(self, prompt: Prompt, max_tokens: int) -> RequestRecord:
        """Send one streamed request and time it; errors are recorded, not raised."""
        path, body = self._body(prompt, max_tokens, stream=True)
        payload = json.dumps(body).encode()
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        record = RequestRecord(t_send=time.perf_counter())
        parser = SSEParser(record)
        clock = time.perf_counter
        try:
            async with self._http.stream("POST", path, content=payload, headers=headers) as response:
                if response.status_code != 200:
                    text = (await response.aread()).decode("utf-8", "replace")
                    record.error = f"HTTP {response.status_code}: {text[:ERROR_BODY_CHARS]}"
                else:
                    async for data in response.aiter_raw():
                        parser.feed(data, clock())
        except httpx.HTTPError as exc:
            raise_if_cancel_requested()
            record.error = f"{type(exc).__name__}: {exc}"
        record.t_end = clock()
        if record.error is None and not record.chunk_times:
            record.error = "the stream ended without a generated token"
        return record

    async def count_prompt_tokens(self, prompt: Prompt) -> int:
        """The server's count of a prompt (one generated token, usage read back)."""
        record = await self.stream(prompt, 1)
        if record.error is not None and record.prompt_tokens is None:
            raise _request_error(self.root, record.error)
        if record.prompt_tokens is None:
            raise PermanentError(
                f"{self.root} reported no usage.prompt_tokens with stream_options.include_usage: "
                "prompt sizes cannot be taken from the server"
            )
        return record.prompt_tokens

    async def latency(self, mode: Literal["generation", "api", "none"], probes: int = 5) -> float:
        """Seconds subtracted from the time to first response to estimate prompt processing.

        `generation` (llama-benchy's mode of that name): a one-token request
        with a one-word prompt, to its first response chunk: network, HTTP,
        scheduling and one decode step. `api`: GET /v1/models to its answer
        (network only). `none`: 0. The minimum of `probes` runs after one
        discarded run: queueing delays only ever add, so the minimum is the
        fixed overhead, and one slow probe cannot shift every prompt figure
        (llama-benchy takes the mean of three).
        """
        if mode == "none":
            return 0.0
        samples: list[float] = []
        tiny = Prompt(context="", prompt="hello", expected_tokens=1)
        for i in range(probes + 1):
            if mode == "generation":
                record = await self.stream(tiny, 1)
                if record.error is not None or record.t_first_response is None:
                    raise _request_error(self.root, record.error or "no response chunk")
                sample = record.t_first_response - record.t_send
            else:
                start = time.perf_counter()
                try:
                    response = await self._http.get("/v1/models")
                except httpx.HTTPError as exc:
                    raise TransientError(f"{self.root}/v1/models: {type(exc).__name__}: {exc}") from exc
                sample = time.perf_counter() - start
                if response.status_code != 200:
                    raise _request_error(self.root, f"HTTP {response.status_code} from /v1/models")
            if i > 0:
                samples.append(sample)
        return min(samples)

    async def served_models(self) -> list[str]:
        try:
            response = await self._http.get("/v1/models")
            data = response.json().get("data") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            raise TransientError(f"{self.root}/v1/models: {type(exc).__name__}: {exc}") from exc
        if not isinstance(data, list):
            raise TransientError(f"{self.root}/v1/models answered {response.status_code} without a model list")
        return [str(m.get("id")) for m in data if isinstance(m, dict)]

    async def server_version(self) -> str | None:
        """What the engine says it is (vLLM and SGLang answer GET /version); None when it does not say."""
        try:
            response = await self._http.get("/version")
            value = response.json().get("version") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        return str(value) if value is not None else None


def _request_error(root: str, message: str) -> TransientError | PermanentError:
    """A 4xx answer will not change by itself (wrong model, bad request); anything else may."""
    if message.startswith("HTTP 4"):
        return PermanentError(f"{root}: {message}")
    return TransientError(f"{root}: {message}")
