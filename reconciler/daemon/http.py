"""The daemon's small HTTP endpoint: /healthz, /status, /metrics and the push webhook.

Four routes do not justify a web framework, but an endpoint that a forge
on the internet may reach (through a proxy) must hold up: bounded request
line, headers and body, a timeout on every read and on every handler, one
request per connection (`Connection: close`), 404/405/411/413/431 answered
instead of hanging, and a handler that raises costs one 500, never the
daemon. It binds loopback by default; HMAC verification of webhooks belongs
to the handler the daemon passes in.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import ipaddress
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import structlog

log = structlog.get_logger("lanes.http")

HealthFn = Callable[[], tuple[bool, str]]
StatusFn = Callable[[], Any]  # a JSON-able object, or an awaitable of one
MetricsFn = Callable[[], tuple[bytes, str]]  # (body, content type)
WebhookFn = Callable[[Mapping[str, str], bytes], Awaitable[tuple[int, str]]]

MAX_WEBHOOK_BODY = 1 << 20


@dataclass(frozen=True)
class Limits:
    """Bounds on what one client may send and how long it may take."""

    max_head: int = 16 * 1024  # request line + headers
    max_body: int = MAX_WEBHOOK_BODY
    head_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    handler_timeout_s: float = 30.0
    max_connections: int = 64


def parse_listen(listen: str) -> tuple[str, int]:
    """`HOST:PORT` or `[V6]:PORT` -> (host, port); port 0 asks the kernel for a free one (tests)."""
    text = listen.strip()
    if text.startswith("["):
        host, sep, port_text = text[1:].partition("]:")
        if not sep:
            raise ValueError(f"'{listen}' is not [IPV6]:PORT")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"'{listen}': '{host}' in [IPV6]:PORT is not an IPv6 address") from None
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or not host or ":" in host:
            raise ValueError(f"'{listen}' is not HOST:PORT (write IPv6 addresses as [::1]:9464)")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"'{listen}': port must be a number from 0 to 65535")
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _HttpError(Exception):
    def __init__(self, status: int, text: str = "", headers: Mapping[str, str] | None = None) -> None:
        super().__init__(text)
        self.status = status
        self.text = text or HTTPStatus(status).phrase.lower()
        self.headers = dict(headers or {})


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes = b""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    headers: Mapping[str, str] | None = None


def _text(status: int, text: str) -> Response:
    return Response(status, (text.rstrip("\n") + "\n").encode())


class HttpServer:
    """`await start()`, then serve until `await close()`; `port` is the bound port."""

    def __init__(
        self,
        listen: str,
        *,
        health: HealthFn,
        status: StatusFn | None = None,
        metrics: MetricsFn | None = None,
        webhook: WebhookFn | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.host, self._port = parse_listen(listen)
        self._health = health
        self._status = status
        self._metrics = metrics
        self._webhook = webhook
        self.limits = limits or Limits()
        self._server: asyncio.Server | None = None
        self._conns: dict[asyncio.Task[Any], asyncio.StreamWriter] = {}
        self._closing = False

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            return self._port
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host, self._port, limit=self.limits.max_head, reuse_address=True
        )
        log.info("http.listening", url=self.url, loopback=is_loopback(self.host))

    async def close(self, grace_s: float = 1.0) -> None:
        """Stop listening, drop open connections; a handler still running after `grace_s` is cancelled."""
        server, self._server = self._server, None
        if server is None:
            return
        self._closing = True
        server.close()
        for writer in self._conns.values():
            writer.transport.abort()
        if self._conns:
            _, pending = await asyncio.wait(set(self._conns), timeout=grace_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        await server.wait_closed()
        self._closing = False

    # -- one connection, one request -------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns[task] = writer
        try:
            await self._one_request(reader, writer, refuse=len(self._conns) > self.limits.max_connections)
            await self._linger(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # Only close() cancels us; ending normally keeps asyncio from logging the server's task as failed.
            if not self._closing:
                raise
        except Exception as exc:
            log.exception("http.connection_failed", error=str(exc))
        finally:
            self._conns.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, refuse: bool) -> None:
        method = ""
        try:
            request = await self._read_request(reader)
            method = request.method
            if refuse:
                raise _HttpError(503, "too many connections")
            response = await self._route(request)
        except _HttpError as exc:
            response = Response(exc.status, (exc.text.rstrip("\n") + "\n").encode(), headers=exc.headers)
        log.debug("http.request", method=method, status=response.status)
        await self._send(writer, response, head_only=method == "HEAD")

    async def _linger(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Half-close, then read and drop what the client still sends (an unread body refused with 413),
        so closing does not turn into a TCP reset that destroys the response before the client reads it."""
        if writer.can_write_eof():
            writer.write_eof()
        dropped = 0
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                while dropped <= 2 * self.limits.max_body:
                    chunk = await reader.read(65536)
                    if not chunk:
                        break
                    dropped += len(chunk)

    async def _read_request(self, reader: asyncio.StreamReader) -> Request:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.limits.head_timeout_s)
        except TimeoutError:
            raise _HttpError(408) from None
        except asyncio.LimitOverrunError:
            raise _HttpError(431) from None
        except asyncio.IncompleteReadError as exc:
            if len(exc.partial) >= self.limits.max_head:
                raise _HttpError(431) from None
            raise
        try:
            lines = head.decode("latin-1").split("\r\n")
            method, target, version = lines[0].split(" ")
        except ValueError:
            raise _HttpError(400, "malformed request line") from None
        if not version.startswith("HTTP/1.") or not method.isalpha() or not target.startswith("/"):
            raise _HttpError(400, "malformed request line")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise _HttpError(400, "malformed header")
            key = name.lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        body = b""
        if "transfer-encoding" in headers:
            raise _HttpError(501, "chunked request bodies are not supported: send Content-Length")
        if "content-length" in headers:
            length_text = headers["content-length"]
            if not length_text.isdigit():
                raise _HttpError(400, "bad Content-Length")
            length = int(length_text)
            if length > self.limits.max_body:
                raise _HttpError(413, f"body larger than {self.limits.max_body} bytes")
            if length:
                try:
                    body = await asyncio.wait_for(reader.readexactly(length), self.limits.body_timeout_s)
                except TimeoutError:
                    raise _HttpError(408) from None
        elif method == "POST":
            raise _HttpError(411)
        return Request(method.upper(), target.split("?", 1)[0], headers, body)

    async def _route(self, request: Request) -> Response:
        routes: dict[str, tuple[tuple[str, ...], Callable[[Request], Awaitable[Response]]]] = {
            "/healthz": (("GET", "HEAD"), self._get_health),
        }
        if self._status is not None:
            routes["/status"] = (("GET", "HEAD"), self._get_status)
        if self._metrics is not None:
            routes["/metrics"] = (("GET", "HEAD"), self._get_metrics)
        if self._webhook is not None:
            routes["/webhook"] = (("POST",), self._post_webhook)
        if request.path not in routes:
            raise _HttpError(404)
        methods, handler = routes[request.path]
        if request.method not in methods:
            raise _HttpError(405, headers={"Allow": ", ".join(methods)})
        try:
            return await asyncio.wait_for(handler(request), self.limits.handler_timeout_s)
        except _HttpError:
            raise
        except TimeoutError:
            log.warning("http.handler_timeout", path=request.path)
            raise _HttpError(504, "handler timed out") from None
        except Exception as exc:
            log.exception("http.handler_failed", path=request.path, error=str(exc))
            raise _HttpError(500) from None

    async def _get_health(self, _request: Request) -> Response:
        ok, detail = self._health()
        if ok:
            return _text(200, f"ok: {detail}" if detail else "ok")
        return _text(503, f"unhealthy: {detail}" if detail else "unhealthy")

    async def _get_status(self, _request: Request) -> Response:
        assert self._status is not None
        value = self._status()
        if inspect.isawaitable(value):
            value = await value
        body = json.dumps(value, indent=2, default=str).encode() + b"\n"
        return Response(200, body, "application/json")

    async def _get_metrics(self, _request: Request) -> Response:
        assert self._metrics is not None
        body, content_type = self._metrics()
        return Response(200, body, content_type)

    async def _post_webhook(self, request: Request) -> Response:
        assert self._webhook is not None
        status, text = await self._webhook(request.headers, request.body)
        if not 200 <= status <= 599:
            raise ValueError(f"webhook handler returned HTTP status {status}")
        return _text(status, text)

    async def _send(self, writer: asyncio.StreamWriter, response: Response, *, head_only: bool) -> None:
        try:
            reason = HTTPStatus(response.status).phrase
        except ValueError:
            reason = "Status"
        head = [
            f"HTTP/1.1 {response.status} {reason}",
            f"Content-Type: {response.content_type}",
            f"Content-Length: {len(response.body)}",
            "Connection: close",
            "Cache-Control: no-store",
            "X-Content-Type-Options: nosniff",
        ]
        head += [f"{k}: {v}" for k, v in (response.headers or {}).items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        if not head_only:
            writer.write(response.body)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
