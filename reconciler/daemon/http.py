"""The daemon's small HTTP endpoint: /healthz, /status, /metrics, the push webhook and the dashboard's pages.

Four routes do not justify a web framework, but an endpoint that a forge
on the internet may reach (through a proxy) must hold up against a flood of
slow clients as well as against malformed requests:

- a cap on open connections, enforced before a byte is read: the accept loop
  is ours, so a connection over the cap is never read. When the table is full,
  a new connection takes the slot of the one that has waited longest for its
  request head (the one its head deadline would drop first), so a normal
  client is still answered while slow ones hold the rest; when every slot is
  past its head, the new connection is closed at once;
- a deadline on the request head, one on the body, one on the handler and one
  on sending the answer, per connection;
- the route is chosen from the head alone: a body is read only for POST
  /webhook, up to `max_body`, at most `max_bodies` at once (the others wait
  unread, and can give up their slot, so slow uploads cannot hold every
  slot); a GET or HEAD with a body is refused (400);
- `accept()` failures (descriptors exhausted by the SSH pool, say) are
  logged at most once per `accept_error_interval_s`, with the count, and
  accepting backs off instead of spinning;
- one request per connection (`Connection: close`), 400/404/405/408/411/413/
  431/501/503 answered instead of hanging, and a handler that raises costs one
  500, never the daemon.

It binds loopback by default; HMAC verification of webhooks belongs to the
handler the daemon passes in. `bench/http_flood.py` measures it under a flood.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import ipaddress
import json
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import structlog

from reconciler.daemon.httpconn import Conn, ConnTable, EveryInterval

log = structlog.get_logger("lanes.http")

HealthFn = Callable[[], tuple[bool, str]]
StatusFn = Callable[[], Any]  # a JSON-able object, or an awaitable of one
MetricsFn = Callable[[], tuple[bytes, str]]  # (body, content type)
WebhookFn = Callable[[Mapping[str, str], bytes], Awaitable[tuple[int, str]]]
PAGE_PREFIXES = ("/lanes/",)
"""Dashboard pages besides `/` (reconciler.dashboard); each is a GET or HEAD like /status."""

MAX_WEBHOOK_BODY = 1 << 20
ACCEPT_RETRY_S = 0.5


@dataclass(frozen=True)
class Limits:
    """Bounds on what one client may send and how long it may take, and on how many may be connected."""

    max_head: int = 16 * 1024  # request line + headers
    max_body: int = MAX_WEBHOOK_BODY
    head_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    handler_timeout_s: float = 30.0
    send_timeout_s: float = 10.0
    max_connections: int = 64
    max_bodies: int = 8  # bodies read at once: with handlers, the only slots a new connection cannot take over
    backlog: int = 128
    accept_error_interval_s: float = 60.0


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


Handler = Callable[[Request], Awaitable[Response]]


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
        pages: Handler | None = None,
        limits: Limits | None = None,
        control: Handler | None = None,
    ) -> None:
        self.host, self._port = parse_listen(listen)
        self._health = health
        self._status = status
        self._metrics = metrics
        self._webhook = webhook
        self._pages = pages
        self._control = control  # /control/<command>: reconciler.daemon.control (authorizes itself)
        self.limits = limits or Limits()
        self._sock: socket.socket | None = None
        self._acceptor: asyncio.Task[None] | None = None
        self._conns = ConnTable(self.limits.max_connections)
        self._accept_errors = EveryInterval(self.limits.accept_error_interval_s)
        self._turned_away = EveryInterval(self.limits.accept_error_interval_s)
        self._body_slots = asyncio.Semaphore(self.limits.max_bodies)
        self._closing = False

    @property
    def port(self) -> int:
        if self._sock is None:
            return self._port
        return int(self._sock.getsockname()[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(self.host, self._port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(self.limits.backlog)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self._acceptor = asyncio.create_task(self._accept_loop(sock), name="http-accept")
        log.info(
            "http.listening", url=self.url, loopback=is_loopback(self.host), max_connections=self.limits.max_connections
        )

    async def close(self, grace_s: float = 1.0) -> None:
        """Stop listening, drop open connections; a handler still running after `grace_s` is cancelled."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        self._closing = True
        if self._acceptor is not None:
            self._acceptor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._acceptor
            self._acceptor = None
        sock.close()
        tasks = self._conns.abort_all()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        self._closing = False

    # -- accepting ---------------------------------------------------------------------

    async def _accept_loop(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                client, _ = await loop.sock_accept(sock)
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                continue
            except OSError as exc:
                # EMFILE, ENFILE, ENOBUFS, ENOMEM: the connection stays in the backlog; try again later.
                if self._accept_errors.due():
                    log.error(
                        "http.accept_failed", error=exc.strerror or str(exc), since_last=self._accept_errors.take()
                    )
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            except Exception as exc:  # never let the listener die silently
                if self._accept_errors.due():
                    log.exception("http.accept_failed", error=str(exc), since_last=self._accept_errors.take())
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            if self._conns.full() and not self._conns.evict_oldest_head():
                # Every slot is past its head (reading a body, handling, answering): not read, closed now.
                client.close()
                await asyncio.sleep(0)
                if self._turned_away.due():
                    log.warning(
                        "http.connections_full", max_connections=self._conns.cap, since_last=self._turned_away.take()
                    )
                continue
            client.setblocking(False)
            task = asyncio.create_task(self._serve(client))
            # Even a task cancelled before its first step (its `finally` never runs) frees its slot and socket.
            task.add_done_callback(functools.partial(self._finished, client))
            self._conns.add(Conn(task, loop.time()))
            # sock_accept does not yield while connections are pending: let the new connection read its head
            # and an evicted one close its descriptor before the next accept.
            await asyncio.sleep(0)

    def _finished(self, sock: socket.socket, task: asyncio.Task[Any]) -> None:
        self._conns.remove(task)
        sock.close()

    # -- one connection, one request -------------------------------------------------

    async def _serve(self, sock: socket.socket) -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        writer: asyncio.StreamWriter | None = None
        try:
            reader = asyncio.StreamReader(limit=self.limits.max_head)
            protocol = asyncio.StreamReaderProtocol(reader)
            transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock=sock)
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            self._conns.opened(task, transport)
            await self._one_request(task, reader, writer)
            await self._linger(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # close() and eviction cancel us; ending normally keeps asyncio from logging the task as failed.
            if not (self._closing or self._conns.evicted(task)):
                raise
        except Exception as exc:
            log.exception("http.connection_failed", error=str(exc))
        finally:
            if writer is not None:
                writer.close()
                try:
                    await asyncio.wait_for(writer.wait_closed(), 1.0)
                except BaseException:  # a timeout or a cancel (close()): the descriptor is closed now all the same
                    writer.transport.abort()
            else:
                sock.close()
            self._conns.remove(task)  # only now: the table counts open descriptors

    async def _one_request(
        self, task: asyncio.Task[Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        method = ""
        try:
            method, path, headers = await self._read_head(reader)
            handler = self._handler(method, path)
            body = await self._read_body(task, reader, method, headers)
            self._conns.past_head(task)
            response = await self._run(handler, Request(method, path, headers, body))
        except _HttpError as exc:
            response = Response(exc.status, (exc.text.rstrip("\n") + "\n").encode(), headers=exc.headers)
        self._conns.past_head(task)
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

    async def _read_head(self, reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str]]:
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
        return method.upper(), target.split("?", 1)[0], headers

    async def _read_body(
        self, task: asyncio.Task[Any], reader: asyncio.StreamReader, method: str, headers: Mapping[str, str]
    ) -> bytes:
        """The body of a POST, within its deadline and size cap; a GET or HEAD that announces one is refused.

        At most `max_bodies` are read at once; a connection waiting for its turn has nothing read yet, so
        it stays as evictable as one still sending its head."""
        length_text = headers.get("content-length")
        if method in ("GET", "HEAD"):
            if "transfer-encoding" in headers or (length_text is not None and length_text != "0"):
                raise _HttpError(400, f"a {method} request carries no body")
            return b""
        if "transfer-encoding" in headers:
            raise _HttpError(501, "chunked request bodies are not supported: send Content-Length")
        if length_text is None:
            raise _HttpError(411)
        if not length_text.isdigit():
            raise _HttpError(400, "bad Content-Length")
        length = int(length_text)
        if length > self.limits.max_body:
            raise _HttpError(413, f"body larger than {self.limits.max_body} bytes")
        if not length:
            return b""
        try:
            async with asyncio.timeout(self.limits.body_timeout_s), self._body_slots:
                self._conns.past_head(task)
                return await reader.readexactly(length)
        except TimeoutError:
            raise _HttpError(408) from None

    def _handler(self, method: str, path: str) -> Handler:
        """The route for a request head, before any body is read: 404 and 405 cost no read."""
        routes: dict[str, tuple[tuple[str, ...], Handler]] = {"/healthz": (("GET", "HEAD"), self._get_health)}
        if self._status is not None:
            routes["/status"] = (("GET", "HEAD"), self._get_status)
        if self._metrics is not None:
            routes["/metrics"] = (("GET", "HEAD"), self._get_metrics)
        if self._webhook is not None:
            routes["/webhook"] = (("POST",), self._post_webhook)
        if self._pages is not None and (path == "/" or path.startswith(PAGE_PREFIXES)):
            routes[path] = (("GET", "HEAD"), self._pages)
        if self._control is not None and path.startswith("/control/"):
            routes[path] = (("GET", "POST"), self._control)
        if path not in routes:
            raise _HttpError(404)
        methods, handler = routes[path]
        if method not in methods:
            raise _HttpError(405, headers={"Allow": ", ".join(methods)})
        return handler

    async def _run(self, handler: Handler, request: Request) -> Response:
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
        try:
            await asyncio.wait_for(writer.drain(), self.limits.send_timeout_s)
        except TimeoutError:
            writer.transport.abort()  # a client that does not read its answer does not keep the slot
        except ConnectionError:
            pass
