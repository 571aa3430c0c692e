"""Upstream answers read with a size cap and a time cap, and parsed without raising past their source.

GitHub, a registry or its token realm answer whatever they like: a 100 MB releases page cost the daemon
202 MB of resident memory when it was read whole with `response.json()`, a body dripped one byte a
second never trips httpx's per-read timeout, and a truncated one raised a `JSONDecodeError` that no
poller expected. Here every answer body is read in chunks up to `max_bytes` (counted after content
decoding, so a gzip bomb stops at the cap too) within one deadline for the whole body, and JSON that
does not parse is a `TransientError` of that source, which the poller records as its failure.

`BoundedTransport` puts the raw cap under httpx itself: httpx reads the bodies of redirects (and of
the answers an auth flow looks at) on its own, before any caller sees them; a redirect's body is never
used, so it is dropped unread.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from reconciler.errors import TransientError

MAX_ANSWER_BYTES = 16 << 20
"""A releases page of 100 items with their notes is a few MB (vLLM's notes run to tens of KB each)."""

ANSWER_DEADLINE_S = 60.0
"""The whole body, start to end: httpx's own timeout is per read and a slow drip never trips it."""

_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class AnswerTooLargeError(TransientError):
    """An upstream answered with more bytes than an answer of its kind can need."""


def _where(request: httpx.Request) -> str:
    return str(request.url.copy_with(query=None, userinfo=b""))


class _CappedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, max_bytes: int, where: str) -> None:
        self._inner = inner
        self._max = max_bytes
        self._where = where

    async def __aiter__(self) -> AsyncIterator[bytes]:
        total = 0
        async for chunk in self._inner:
            total += len(chunk)
            if total > self._max:
                raise AnswerTooLargeError(f"{self._where}: answer exceeds {self._max} bytes; not read further")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Empty(httpx.AsyncByteStream):
    async def __aiter__(self) -> AsyncIterator[bytes]:
        return
        yield b""  # pragma: no cover - makes this an async generator

    async def aclose(self) -> None:
        return None


class BoundedTransport(httpx.AsyncBaseTransport):
    """A transport whose answers carry at most `max_bytes` on the wire; redirect bodies are dropped."""

    def __init__(self, inner: httpx.AsyncBaseTransport, max_bytes: int = MAX_ANSWER_BYTES) -> None:
        self._inner = inner
        self._max = max_bytes

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        headers = response.headers
        if response.status_code in _REDIRECTS:
            await stream.aclose()
            headers = httpx.Headers([(k, v) for k, v in headers.multi_items() if k.lower() not in _BODY_HEADERS])
            body: httpx.AsyncByteStream = _Empty()
        else:
            body = _CappedStream(stream, self._max, _where(request))
        return httpx.Response(response.status_code, headers=headers, stream=body, extensions=response.extensions)

    async def aclose(self) -> None:
        await self._inner.aclose()


_BODY_HEADERS = frozenset({"content-length", "content-encoding", "transfer-encoding"})


async def read_bounded(response: httpx.Response, max_bytes: int, deadline_s: float) -> None:
    """Read a streamed answer's (decoded) body into `response.content`, or raise TransientError and close it."""
    where = _where(response.request)
    chunks: list[bytes] = []
    total = 0
    try:
        async with asyncio.timeout(deadline_s):  # not wait_for: it can drop a cancel on 3.11
            async for chunk in response.aiter_bytes():
                total += len(chunk)
                if total > max_bytes:
                    raise AnswerTooLargeError(f"{where}: answer exceeds {max_bytes} bytes; not read further")
                chunks.append(chunk)
    except TimeoutError:
        raise TransientError(f"{where}: answer not read whole within {deadline_s:g} s") from None
    except httpx.HTTPError as exc:
        raise TransientError(f"{where}: answer broke off: {type(exc).__name__}: {exc}") from None
    finally:
        await response.aclose()
    # What httpx's own `aread()` does once the stream is consumed: `.content`, `.json()` then work as usual.
    response._content = b"".join(chunks)


def answer_json(response: httpx.Response, what: str) -> Any:
    """The answer's JSON; a body that is not JSON (truncated, HTML, binary) is this source's TransientError."""
    try:
        return json.loads(response.content)
    except (ValueError, RecursionError) as exc:
        detail = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise TransientError(f"{what}: answer is not valid JSON ({detail})") from None
