"""Health observed at every resync: a serving lane's engine is asked, not assumed.

A lane whose ranks all run the spec that once passed its gate is noop for the
planner, and a lane held back (its new spec failed and was rolled back, a
backoff, a lease, a change window) serves what last passed its gate; but a
running container is not a serving engine (it can hang, lose its GPU, or
answer 503 after a fault). At each cycle the head is asked its health path
once: one HTTP round trip per running lane, with a short timeout. Every
rank's container state comes from the cycle's probe already (a rank that
exited is drift: the lane is redeployed, or, held back, its healthy spec put
back as it was).

The question is one plain-HTTP GET whose status line is all that is read, so it is asked over a bare
socket on the loop rather than through httpx (`Assessment` still is an httpx client, for callers that need
more of an engine than that): at 250 lanes httpx's client, pool and h11 machinery cost
about 0.2 s of CPU per resync against 0.04 s for this (bench/README.md, issue 27). The engine's health
path is on the data plane's loopback or LAN and never behind a proxy: no proxy settings are read, no
redirect is followed (httpx followed none either), no TLS (the URL was always http).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import quote

import httpx

from reconciler.cancel import raise_if_cancel_requested
from reconciler.execute.readiness import tls_context
from reconciler.spec.lane import Health

ASSESS_CONCURRENCY = 32
"""Health requests of one cycle in flight at once. Unbounded, 250 lanes' requests all waited in one httpx
pool, whose every assignment scans each queued request against each connection: at 250 lanes that was 2.3
million checks, most of a no-op resync's CPU (bench/README.md, issue 27). 32 at once answer 250 loopback
engines in a few tens of ms; an engine that hangs holds one slot for the timeout, not the cycle."""

STATUS_LINE_LIMIT = 8192
"""The most read of an answer: its status line ("HTTP/1.1 200 OK"); a longer line is not an HTTP answer."""


class Bounded(Protocol):
    """What `engine_answers` needs of its caller: a timeout per request and the slots they share."""

    timeout_s: float
    slots: asyncio.Semaphore


@dataclass
class Asking:
    """The bounds alone, without an httpx client: the daemon's health rounds ask nothing but status lines,
    and a client per round (its pool, its TLS set-up) cost more than the round's own requests."""

    timeout_s: float
    slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(ASSESS_CONCURRENCY))


class Assessment(httpx.AsyncClient):
    """One cycle's health requests: `slots` at once, each within `timeout_s` (connect to status line).

    Also an httpx client (one TLS context, a pool of at most `slots`, nothing kept alive) for callers that
    ask an engine more than its status line, such as a first token: `engine_answers` does not use it."""

    def __init__(self, timeout_s: float, slots: int = ASSESS_CONCURRENCY) -> None:
        limits = httpx.Limits(max_connections=slots, max_keepalive_connections=0)
        super().__init__(timeout=timeout_s, verify=tls_context(), limits=limits)
        self.timeout_s = timeout_s
        self.slots = asyncio.Semaphore(slots)


def assessment_client(timeout_s: float) -> Assessment:
    """What a cycle's lanes ask their engines' health with (`engine_answers`)."""
    return Assessment(timeout_s)


async def engine_answers(assessment: Bounded, address: str, port: int, health: Health) -> str | None:
    """None when the head's health path answers 200; otherwise what it answered, for a person."""
    where = f"{address}:{port}{health.path}"
    try:
        async with assessment.slots, asyncio.timeout(assessment.timeout_s):
            status = await _status_of(address, port, health.path)
    except TimeoutError:
        raise_if_cancel_requested()
        return f"{where} did not answer (no answer within {assessment.timeout_s:g} s)"
    except (OSError, ValueError, EOFError) as exc:
        raise_if_cancel_requested()
        return f"{where} did not answer ({type(exc).__name__}: {exc or 'no reason given'})"
    if status != 200:
        return f"{where} answered {status}"
    return None


async def _status_of(address: str, port: int, path: str) -> int:
    """The status code of `GET path` on address:port (HTTP/1.x), read from the answer's first line.

    On the loop's own socket calls, not a stream: the daemon's health rounds ask about 2 engines a second
    at 250 lanes, and a stream's transport, protocol, reader and writer, made and torn down for one line,
    cost about half a round's CPU (most of the daemon's idle CPU, issue 27)."""
    loop = asyncio.get_running_loop()
    sock = await _connected(loop, address, port)
    try:
        host = f"[{address}]" if ":" in address else address
        # As a URL would carry it: spaces, controls and non-ASCII percent-encoded, so the lane file's path
        # can never end the request line or add a header; escapes already in it are kept.
        target = quote(path, safe="/:@!$&'()*+,;=?%~")
        request = f"GET {target} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
        await loop.sock_sendall(sock, request.encode("ascii"))
        line = await _first_line(loop, sock)
    finally:
        sock.close()
    parts = line.decode("latin-1").split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not (parts[1].isdigit() and len(parts[1]) == 3):
        raise ValueError(f"not an HTTP answer: {line[:80]!r}")
    return int(parts[1])


async def _connected(loop: asyncio.AbstractEventLoop, address: str, port: int) -> socket.socket:
    """A connected non-blocking socket to address:port: an IP literal as it stands, a name's addresses in the
    order the resolver gives them (the first that accepts)."""
    literal: list[tuple[socket.AddressFamily, tuple[object, ...]]] | None = None
    for family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            socket.inet_pton(family, address)
            literal = [(family, (address, port))]
            break
    found = literal or [(info[0], info[4]) for info in await loop.getaddrinfo(address, port, type=socket.SOCK_STREAM)]
    last: OSError | None = None
    for family, sockaddr in found:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, sockaddr)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        except BaseException:  # a cancel (the request's timeout): the socket is not left open
            sock.close()
            raise
        return sock
    raise last or OSError(f"cannot connect to {address}")


async def _first_line(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bytes:
    """The answer up to its first line feed, at most `STATUS_LINE_LIMIT` bytes read."""
    got = b""
    while (end := got.find(b"\n")) < 0:
        if len(got) >= STATUS_LINE_LIMIT:
            raise ValueError(f"no status line in the first {STATUS_LINE_LIMIT} bytes")
        chunk = await loop.sock_recv(sock, STATUS_LINE_LIMIT - len(got))
        if not chunk:
            raise EOFError(f"the connection closed after {len(got)} bytes, before a status line")
        got += chunk
    return got[: end + 1]
