"""The daemon's HTTP server in this process, for tests: the hooks the daemon would pass in (with knobs), the
status rows they answer, and a raw request on a socket (bytes in, bytes out, no HTTP client's manners)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.daemon.http import HttpServer
from reconciler.daemon.metrics import Metrics

ROWS: list[dict[str, Any]] = [
    {"name": "dsv41", "desired": "running", "health": "healthy", "commit": "a" * 40, "hosts": ["dgx1"]},
    {"name": "glm53", "desired": "stopped", "health": "stopped", "commit": None, "hosts": ["dgx1"]},
    {"name": "eugr", "desired": "running", "health": "failed", "commit": "b" * 40, "hosts": ["dgx5"]},
]


@dataclass
class Hooks:
    """What the daemon would pass in, with knobs for the tests."""

    ok: bool = True
    detail: str = ""
    metrics: Metrics | None = None
    webhook_calls: list[tuple[dict[str, str], bytes]] | None = None
    webhook_answer: tuple[int, str] = (202, "fetch scheduled")
    webhook_delay_s: float = 0.0
    status_fails: bool = False

    def health(self) -> tuple[bool, str]:
        return self.ok, self.detail

    async def status(self) -> dict[str, Any]:
        if self.status_fails:
            raise RuntimeError("database is locked")
        return {"lanes": ROWS}

    def render(self) -> tuple[bytes, str]:
        assert self.metrics is not None
        return self.metrics.render()

    async def webhook(self, headers: Mapping[str, str], body: bytes) -> tuple[int, str]:
        if self.webhook_calls is None:
            self.webhook_calls = []
        self.webhook_calls.append((dict(headers), body))
        await asyncio.sleep(self.webhook_delay_s)
        return self.webhook_answer


async def raw(server: HttpServer, data: bytes, *, close_write: bool = True) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(data)
    await writer.drain()
    if close_write:
        writer.write_eof()
    out = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    await writer.wait_closed()
    return out
