"""A cycle's health requests go out a bounded number at once (issue 27: unbounded, 250 of them waiting in one
httpx pool cost most of a no-op resync's CPU), each gets its own answer, and what is not an answer (not HTTP,
a hang-up, silence) is said as such."""

from __future__ import annotations

import asyncio

from reconciler.execute.assess import Assessment, engine_answers
from reconciler.spec.lane import Health


class Engines:
    """One loopback HTTP server standing in for many engines: counts the requests open at once."""

    def __init__(self, status_for: dict[str, int]) -> None:
        self.status_for = status_for
        self.open = 0
        self.most = 0
        self.release = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = (await reader.readline()).decode()
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        path = line.split()[1]
        self.open += 1
        self.most = max(self.most, self.open)
        # Hold every answer until the client stops opening requests, so the bound is what is measured.
        await asyncio.sleep(0.05)
        self.open -= 1
        status = self.status_for.get(path, 200)
        writer.write(f"HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".encode())
        await writer.drain()
        writer.close()


async def test_at_most_the_slots_are_asked_at_once_and_each_lane_gets_its_answer() -> None:
    engines = Engines({"/lane-3/health": 503})
    server = await asyncio.start_server(engines.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with Assessment(timeout_s=10.0, slots=4) as assessment:
            answers = await asyncio.gather(
                *(engine_answers(assessment, "127.0.0.1", port, Health(path=f"/lane-{i}/health")) for i in range(20))
            )
    finally:
        server.close()
        await server.wait_closed()
    assert 1 < engines.most <= 4
    assert answers[3] == f"127.0.0.1:{port}/lane-3/health answered 503"
    assert [a for i, a in enumerate(answers) if i != 3] == [None] * 19


async def test_an_engine_that_does_not_answer_is_said_with_its_address() -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    async with Assessment(timeout_s=2.0) as assessment:
        answer = await engine_answers(assessment, "127.0.0.1", port, Health())
    assert answer is not None
    assert answer.startswith(f"127.0.0.1:{port}") and "did not answer" in answer


async def serve(handler: object) -> tuple[asyncio.Server, int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)  # type: ignore[arg-type]
    return server, server.sockets[0].getsockname()[1]


async def test_what_is_not_an_http_answer_is_said_as_such() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n")
        await writer.drain()
        writer.close()

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(b"HTTP/1.1 2")
        writer.close()

    for handler, said in (
        (garbage, "ValueError: not an HTTP answer: b'SSH-2.0"),
        (hang_up, "EOFError: the connection"),
    ):
        server, port = await serve(handler)
        try:
            async with Assessment(timeout_s=10.0) as assessment:
                answer = await engine_answers(assessment, "127.0.0.1", port, Health())
        finally:
            server.close()
            await server.wait_closed()
        assert answer is not None and answer.startswith(f"127.0.0.1:{port}/health did not answer ({said}"), answer


async def test_an_engine_that_accepts_and_never_answers_is_given_up_on_at_the_timeout() -> None:
    held: list[asyncio.StreamWriter] = []

    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server, port = await serve(mute)
    try:
        async with Assessment(timeout_s=0.2) as assessment:
            answer = await engine_answers(assessment, "127.0.0.1", port, Health())
    finally:
        for w in held:
            w.close()
        server.close()
        await server.wait_closed()
    assert answer == f"127.0.0.1:{port}/health did not answer (no answer within 0.2 s)"


async def test_the_lane_files_path_cannot_end_the_request_line() -> None:
    lines: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (line := await reader.readline()) not in (b"\r\n", b""):
            lines.append(line)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server, port = await serve(record)
    try:
        async with Assessment(timeout_s=10.0) as assessment:
            path = "/health x\r\nX-Injected: 1?probe=%2F&é"
            answer = await engine_answers(assessment, "127.0.0.1", port, Health(path=path))
    finally:
        server.close()
        await server.wait_closed()
    assert answer is None
    assert lines[0] == b"GET /health%20x%0D%0AX-Injected:%201?probe=%2F&%C3%A9 HTTP/1.1\r\n"
    assert not [line for line in lines if line.lower().startswith(b"x-injected")]
    assert lines[1] == f"Host: 127.0.0.1:{port}\r\n".encode()


async def asked(handler: object, address: str = "127.0.0.1") -> tuple[str | None, int]:
    """What `engine_answers` says of one engine served by `handler` at `address`, and its port."""
    server, port = await serve(handler)
    try:
        async with Assessment(timeout_s=10.0) as assessment:
            return await engine_answers(assessment, address, port, Health()), port
    finally:
        server.close()
        await server.wait_closed()


async def test_an_answer_with_no_line_feed_in_its_first_bytes_is_not_read_on() -> None:
    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(b"H" * 20000)
        await writer.drain()
        writer.close()

    answer, port = await asked(endless)
    assert answer == f"127.0.0.1:{port}/health did not answer (ValueError: no status line in the first 8192 bytes)"


async def test_an_engine_named_by_a_host_name_is_asked_at_an_address_it_resolves_to() -> None:
    async def busy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(b"HTTP/1.1 503 X\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    answer, port = await asked(busy, "localhost")
    assert answer == f"localhost:{port}/health answered 503"
