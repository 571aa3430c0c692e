"""An in-process OpenAI-compatible endpoint for `httpx.MockTransport`, with its own token count.

The stand-in counts one token per word; a real tokenizer does not. This one
counts `fixed + per-word` tokens with a per-word cost that depends on the word
(so random words vary, like real text), to show prompts are sized from the
server's count and not from a guess.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

MODEL = "fake-model"


def bpe_like(text: str) -> int:
    """Tokens for text: 1 per word plus 1 per 4 letters beyond the first 4."""
    return sum(1 + max(len(w) - 4, 0) // 4 for w in text.split())


class Stream(httpx.AsyncByteStream):
    def __init__(self, events: list[bytes]) -> None:
        self.events = events

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for event in self.events:
            yield event


def handler(
    count: Callable[[str], int] = bpe_like,
    *,
    fixed: int = 3,
    per_message: int = 4,
    status: int = 200,
    model: str = MODEL,
) -> Callable[[httpx.Request], httpx.Response]:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": model, "object": "model"}]})
        if request.url.path == "/version":
            return httpx.Response(404, json={"detail": "Not Found"})
        if status != 200:
            return httpx.Response(status, json={"message": "nope"})
        body: dict[str, Any] = json.loads(request.content)
        if "messages" in body:
            prompt = fixed + sum(per_message + count(m["content"]) for m in body["messages"])
            chunk = {"object": "chat.completion.chunk"}
            pieces: list[dict[str, Any]] = [{"index": 0, "delta": {"role": "assistant", "content": ""}}]
            pieces += [{"index": 0, "delta": {"content": " tok"}} for _ in range(body["max_tokens"])]
        else:
            prompt = fixed + count(body["prompt"])
            chunk = {"object": "text_completion"}
            pieces = [{"index": 0, "text": " tok"} for _ in range(body["max_tokens"])]
        events = [b"data: " + json.dumps({**chunk, "choices": [p]}).encode() + b"\n\n" for p in pieces]
        usage = {"prompt_tokens": prompt, "completion_tokens": body["max_tokens"]}
        events.append(b"data: " + json.dumps({**chunk, "choices": [], "usage": usage}).encode() + b"\n\n")
        events.append(b"data: [DONE]\n\n")
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Stream(events))

    return handle


def transport(**kwargs: Any) -> httpx.MockTransport:
    return httpx.MockTransport(handler(**kwargs))
