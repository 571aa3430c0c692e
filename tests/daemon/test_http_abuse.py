"""The HTTP server under abuse, in this process: the connection cap holds before anything is read, GET
bodies are refused, uploads at once are bounded, accept() failures do not flood the log, and the webhook
route answers a malformed signed payload with 400 and a replayed delivery with 409."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import socket
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

import reconciler.daemon.http as http_module
from reconciler.daemon.hookroute import DeliveryWindow, receive_push
from reconciler.daemon.http import HttpServer, Limits
from reconciler.source.webhook import sign
from tests.support.httpserver import Hooks, raw
from tests.support.waiting import wait_for

LIMITS = Limits(head_timeout_s=2, body_timeout_s=2, handler_timeout_s=2, max_connections=4, max_bodies=2)
SECRET = b"s3cret-hook-key"


@pytest.fixture
async def served() -> AsyncIterator[tuple[HttpServer, Hooks]]:
    hooks = Hooks()
    server = HttpServer("127.0.0.1:0", health=hooks.health, webhook=hooks.webhook, limits=LIMITS)
    await server.start()
    try:
        yield server, hooks
    finally:
        await server.close()


async def idle(server: HttpServer, n: int) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    conns = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(n)]
    await asyncio.sleep(0.1)
    return conns


async def hang_up(conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]) -> None:
    for _, writer in conns:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def closed_at_once(server: HttpServer) -> bool:
    """Connect, send a request: True when the server closed the connection without an answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        with contextlib.suppress(OSError):
            writer.write(b"GET /healthz HTTP/1.1\r\n\r\n")
            await writer.drain()
        try:
            out = await asyncio.wait_for(reader.read(), 2)
        except ConnectionError:
            out = b""
        return out == b""
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


# -- bodies on GET ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /healthz HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
        b"HEAD /healthz HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
        b"GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    ],
)
async def test_a_get_or_head_with_a_body_is_refused(served: tuple[HttpServer, Hooks], request_bytes: bytes) -> None:
    server, _ = served
    out = await raw(server, request_bytes)
    assert out.startswith(b"HTTP/1.1 400 "), out
    assert (await raw(server, b"GET /healthz HTTP/1.1\r\nContent-Length: 0\r\n\r\n")).startswith(b"HTTP/1.1 200 ")


async def test_a_wrong_route_is_answered_from_the_head_without_reading_the_body(
    served: tuple[HttpServer, Hooks],
) -> None:
    server, hooks = served
    # Announces a body it never sends: a server that read the body first would answer 408 at its body
    # deadline; 404 and 405 say the answer came from the head alone.
    out = await raw(server, b"POST /nowhere HTTP/1.1\r\nContent-Length: 1000\r\n\r\n", close_write=False)
    assert out.startswith(b"HTTP/1.1 404 ")
    out = await raw(server, b"POST /healthz HTTP/1.1\r\nContent-Length: 1000\r\n\r\n", close_write=False)
    assert out.startswith(b"HTTP/1.1 405 ")
    assert hooks.webhook_calls is None


# -- the connection cap -----------------------------------------------------------------


async def test_at_the_cap_a_new_client_takes_the_slot_of_the_one_waiting_longest(
    served: tuple[HttpServer, Hooks],
) -> None:
    server, _ = served
    conns = await idle(server, LIMITS.max_connections)
    assert server.open_connections == LIMITS.max_connections
    async with httpx.AsyncClient(base_url=server.url, timeout=5) as client:
        r = await client.get("/healthz")
        assert (r.status_code, r.text) == (200, "ok\n")
    # The request took the slot of the oldest idle client (closed, nothing sent); the other idle clients
    # kept theirs until their head deadline.
    outs = [await asyncio.wait_for(reader.read(), LIMITS.head_timeout_s + 3) for reader, _ in conns]
    assert outs[0] == b""
    assert all(out.startswith(b"HTTP/1.1 408 ") for out in outs[1:]), outs
    assert server.open_connections <= LIMITS.max_connections
    await hang_up(conns)


async def test_when_every_slot_is_past_its_head_a_new_connection_is_closed_unread(
    served: tuple[HttpServer, Hooks],
) -> None:
    server, hooks = served
    # Every slot is held by a webhook that answers after 1.8 s (inside the 2 s handler timeout); the requests
    # are waited for rather than given a fixed 0.3 s to arrive (at a load of 8 on two cores, none had).
    hooks.webhook_delay_s = 1.8
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        busy = [asyncio.create_task(client.post("/webhook", content=b"{}")) for _ in range(LIMITS.max_connections)]
        await wait_for(
            lambda: hooks.webhook_calls is not None and len(hooks.webhook_calls) == LIMITS.max_connections,
            1.5,
            "every slot held by a webhook",
        )
        assert await closed_at_once(server)  # no answer, and nothing of the request read
        assert [r.status_code for r in await asyncio.gather(*busy)] == [202] * LIMITS.max_connections
        assert (await client.get("/healthz")).status_code == 200


async def test_uploads_read_at_once_are_bounded(served: tuple[HttpServer, Hooks]) -> None:
    server, hooks = served
    head = b"POST /webhook HTTP/1.1\r\nContent-Length: 100\r\n\r\n"
    slow = []
    for _ in range(LIMITS.max_bodies):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(head + b"x")
        await writer.drain()
        slow.append((reader, writer))
    await asyncio.sleep(0.2)
    # A whole upload waits, unread, while the slow ones hold every body slot ...
    waiting = asyncio.create_task(raw(server, head + b"y" * 100))
    await asyncio.sleep(0.3)
    assert not waiting.done() and hooks.webhook_calls is None
    # ... and is read once one of them hangs up.
    await hang_up(slow[:1])
    out = await asyncio.wait_for(waiting, 2)
    assert out.startswith(b"HTTP/1.1 202 "), out
    assert hooks.webhook_calls is not None and [body for _, body in hooks.webhook_calls] == [b"y" * 100]
    outs = [await asyncio.wait_for(reader.read(), LIMITS.body_timeout_s + 3) for reader, _ in slow[1:]]
    assert all(o.startswith(b"HTTP/1.1 408 ") for o in outs), outs
    await hang_up(slow[1:])


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def _record(self, event: str, **kw: Any) -> None:
        self.events.append((event, kw))

    info = debug = warning = error = exception = _record


async def test_accept_failures_are_logged_once_per_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """Descriptors exhausted: accept() fails again and again; one log line says so, with the count."""
    loop = asyncio.get_running_loop()
    real_accept = loop.sock_accept
    failures = 0

    async def failing_accept(sock: socket.socket) -> tuple[socket.socket, Any]:
        nonlocal failures
        if failures < 200:
            failures += 1
            raise OSError(errno.EMFILE, "Too many open files")
        return await real_accept(sock)

    recorder = Recorder()
    monkeypatch.setattr(loop, "sock_accept", failing_accept)
    monkeypatch.setattr(http_module, "ACCEPT_RETRY_S", 0.001)
    monkeypatch.setattr(http_module, "log", recorder)
    server = HttpServer("127.0.0.1:0", health=lambda: (True, ""), limits=Limits(accept_error_interval_s=60))
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            r = await client.get("/healthz")  # answered once accept() works again
        assert r.status_code == 200
    finally:
        await server.close()
    assert failures == 200
    failed = [kw for event, kw in recorder.events if event == "http.accept_failed"]
    assert failed == [{"error": "Too many open files", "since_last": 1}]


# -- the webhook route: malformed signed payloads and replays ----------------------------


def signed(body: bytes, delivery: str | None, event: str = "push") -> dict[str, str]:
    headers = {"X-GitHub-Event": event, "X-Hub-Signature-256": "sha256=" + sign(body, SECRET)}
    if delivery is not None:
        headers["X-GitHub-Delivery"] = delivery
    return headers


def push(after: str) -> bytes:
    return json.dumps({"ref": "refs/heads/main", "after": after, "repository": {}}).encode()


@pytest.mark.parametrize(
    "body",
    [b"{not json", b"[1, 2]", b'{"ref": "refs/heads/main"}', b"\xff\xfe", b'{"ref": 5, "after": []}'],
)
def test_a_malformed_signed_payload_is_a_400(tmp_path: Path, body: bytes) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    status, text, fetch = receive_push(secret, "main", signed(body, "d-1"), body, DeliveryWindow())
    assert (status, fetch) == (400, False) and text.startswith("malformed push payload"), text


def test_a_replayed_delivery_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    window = DeliveryWindow()
    body = push("c" * 40)
    assert receive_push(secret, "main", signed(body, "d-1"), body, window) == (202, "fetch scheduled", True)
    # The same delivery again, then with a fresh ID (the HMAC does not cover headers), then without one.
    for delivery in ("d-1", "d-2", None):
        assert receive_push(secret, "main", signed(body, delivery), body, window)[:2] == (
            409,
            "delivery already received",
        )
    # A new push with a reused delivery ID is refused too; a new push with a new ID is accepted.
    other = push("d" * 40)
    assert receive_push(secret, "main", signed(other, "d-1"), other, window)[0] == 409
    third = push("e" * 40)
    assert receive_push(secret, "main", signed(third, "d-9"), third, window)[0] == 202
    # A forged delivery does not enter the window: its genuine twin is still accepted afterwards.
    fourth = push("f" * 40)
    forged = {**signed(fourth, "d-10"), "X-Hub-Signature-256": "sha256=" + "0" * 64}
    assert receive_push(secret, "main", forged, fourth, window)[0] == 401
    assert receive_push(secret, "main", signed(fourth, "d-10"), fourth, window)[0] == 202


def test_the_window_forgets_the_oldest_beyond_its_size(tmp_path: Path) -> None:
    window = DeliveryWindow(size=4)
    for i in range(10):
        assert window.first_time(f"d-{i}", push(f"{i:040d}"))
    assert len(window) <= 2 * 4  # an ID and a body digest per delivery
    assert window.first_time("d-0", push(f"{0:040d}"))  # long gone: a window, not a ledger
    assert not window.first_time("d-9", b"anything")


async def test_gitea_and_forgejo_delivery_ids_are_checked_through_http(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    window = DeliveryWindow()

    async def webhook(headers: Mapping[str, str], body: bytes) -> tuple[int, str]:
        status, text, _ = receive_push(secret, "main", headers, body, window)
        return status, text

    server = HttpServer("127.0.0.1:0", health=lambda: (True, ""), webhook=webhook, limits=LIMITS)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url) as client:
            body = push("a" * 40)
            gitea = {"X-Gitea-Event": "push", "X-Gitea-Delivery": "g-1", "X-Gitea-Signature": sign(body, SECRET)}
            assert (await client.post("/webhook", content=body, headers=gitea)).status_code == 202
            again = await client.post("/webhook", content=body, headers=gitea)
            assert (again.status_code, again.text) == (409, "delivery already received\n")
            body = push("b" * 40)
            forgejo = {
                "X-Forgejo-Event": "push",
                "X-Forgejo-Delivery": "g-1",  # an ID already seen, under another forge's header
                "X-Forgejo-Signature": sign(body, SECRET),
            }
            assert (await client.post("/webhook", content=body, headers=forgejo)).status_code == 409
            bad = b'{"after": 1}'
            r = await client.post(
                "/webhook",
                content=bad,
                headers={
                    "X-Forgejo-Event": "push",
                    "X-Forgejo-Delivery": "g-2",
                    "X-Forgejo-Signature": sign(bad, SECRET),
                },
            )
            assert r.status_code == 400 and "malformed push payload" in r.text
    finally:
        await server.close()
