"""The holding answer: while a model's only lane changes in place, the gateway answers 503 with Retry-After.

SMG answers 404 `model_not_found` for a model with no worker, which clients read as "this model does not
exist" rather than "come back in a few minutes". So while a model is away (its lanes drained, loading), lanes
registers a worker of its own for it: this small HTTP server on the control node's loopback, one path per
model (`/hold/<token>`, SMG calls `<url>/v1/chat/completions` and the like). It answers SMG's health check and
model listing as an engine would, so SMG routes to it, and every request with 503, a JSON error in OpenAI's
shape, and `Retry-After` in seconds: what is left of the lane's last measured start.

SMG retries a 503 and counts it for the worker's circuit breaker, which opens after a few and then answers
`Retry-After: 1` itself; the holding worker is registered without retries and with no status counted as a
failure (`reconciler.gateway.smg.HOLDING_RESILIENCE`), so every client gets this server's answer, once.
Checked against smg 1.13.0's binary (tests/gateway).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

MAX_HEAD_BYTES = 16 * 1024
MAX_BODY_BYTES = 1024 * 1024
"""A request body is read and dropped (SMG forwards whole chat requests); more than this closes the connection."""
READ_TIMEOUT_S = 10.0
MIN_RETRY_S, MAX_RETRY_S = 1, 3600
MAX_MODELS = 4096
"""Models whose holding answer is kept (a gateway serves tens): bounds what a long-running daemon holds."""


def token(model: str, episode: int = 0) -> str:
    """The path segment of a model's holding worker: a hash, since served names hold `/`, `:` and `@`.

    Each time a model goes away it gets a new one (`episode`): SMG keeps a removed worker's URL draining for a
    few seconds and refuses to register it again meanwhile, and a model changed twice in a row must not wait
    for its last holding worker to let go."""
    return hashlib.sha256(f"{model}\0{episode}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Away:
    model: str
    back_at: float
    """When the model is expected back (epoch s): Retry-After counts down to it, never below a second."""

    def retry_after(self, now: float) -> int:
        return int(min(max(self.back_at - now, MIN_RETRY_S), MAX_RETRY_S) + 0.999)


class HoldServer:
    """The holding worker for every model that is away, on `host:port` (loopback; port 0 picks one)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host, self.port = host, port
        self._away: dict[str, Away] = {}
        self._episode: dict[str, int] = {}
        self._current: frozenset[str] = frozenset()
        self._server: asyncio.base_events.Server | None = None
        self.answered = 0

    def url(self, model: str) -> str:
        return f"http://{self.host}:{self.port}/hold/{token(model, self._episode.get(model, 0))}"

    def set_away(self, away: dict[str, float]) -> None:
        """The models away now, each with when it is expected back.

        A model no longer away keeps its answer (Retry-After counting to its last expected return, then 1 s):
        the gateway still routes to this worker until the lane's own worker is ready and the next routes pass
        lets this one go, and a client must never read 404 in between. Only a path of no model held since
        the daemon started answers 404; at most `MAX_MODELS` are kept."""
        for model, back in away.items():
            if model not in self._current:
                self._episode[model] = self._episode.get(model, 0) + 1  # away again: a URL of its own
            self._away[token(model, self._episode[model])] = Away(model, back)
        self._current = frozenset(away)
        while len(self._away) > MAX_MODELS:
            self._away.pop(next(iter(self._away)))

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """One request on a kept-alive connection; False when the connection should close."""
        async with asyncio.timeout(READ_TIMEOUT_S):
            head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > MAX_HEAD_BYTES:
            return False
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = [*lines[0].split(" "), "", "", ""][:3]
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        length = int(headers.get("content-length", "0") or 0)
        if length < 0 or length > MAX_BODY_BYTES or "chunked" in headers.get("transfer-encoding", "").lower():
            return False
        if length:
            async with asyncio.timeout(READ_TIMEOUT_S):
                await reader.readexactly(length)
        status, body, extra = self._answer(method, path)
        writer.write(_response(status, body, extra))
        await writer.drain()
        self.answered += 1
        return headers.get("connection", "").lower() != "close"

    def _answer(self, method: str, path: str) -> tuple[int, dict[str, Any], dict[str, str]]:
        parts = path.split("?", 1)[0].split("/")
        # ['', 'hold', token, ...rest]
        away = self._away.get(parts[2]) if len(parts) > 2 and parts[1] == "hold" else None
        if away is None:
            return 404, {"error": {"message": "not a model lanes holds", "type": "not_found"}}, {}
        rest = "/" + "/".join(parts[3:])
        if method == "GET" and rest in ("/health", "/"):
            return 200, {"status": "holding"}, {}
        if method == "GET" and rest == "/v1/models":
            return 200, {"object": "list", "data": [{"id": away.model, "object": "model", "owned_by": "lanes"}]}, {}
        if method == "GET":
            return 404, {"error": {"message": "not served while the model is away", "type": "not_found"}}, {}
        seconds = away.retry_after(time.time())
        message = f"{away.model} is being changed and is back in about {seconds} s; retry after that"
        error = {"error": {"message": message, "type": "service_unavailable", "code": "model_loading"}}
        return 503, error, {"Retry-After": str(seconds)}


_REASONS = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}


def _response(status: int, body: dict[str, Any], extra: dict[str, str]) -> bytes:
    data = json.dumps(body).encode()
    head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}", "Content-Type: application/json"]
    head += [f"{k}: {v}" for k, v in extra.items()]
    head.append(f"Content-Length: {len(data)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + data
