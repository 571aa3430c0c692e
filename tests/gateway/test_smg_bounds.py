"""The SMG adapter's bounds: an answer that trickles under httpx's per-read timeout is cut by the call's deadline."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

import reconciler.gateway.smg as smg
from reconciler.gateway.router import RouterError

pytestmark = pytest.mark.timeout(30)


class Trickle(httpx.AsyncByteStream):
    """A byte every 0.05 s, for ever: each read is quick, the whole answer never ends."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            await asyncio.sleep(0.05)
            yield b" "

    async def aclose(self) -> None:
        return None


async def test_a_trickling_answer_is_cut_at_the_calls_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(smg, "DEADLINE_S", 0.5)
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda _r: httpx.Response(200, stream=Trickle())))
    router = smg.SmgRouter("http://127.0.0.1:1", "key", client=client)
    try:
        with pytest.raises(RouterError, match="no whole answer in"):
            await asyncio.wait_for(router.list_workers(), 10)
    finally:
        await client.aclose()
