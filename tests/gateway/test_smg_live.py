"""The real SMG binary (smg 1.13.0, installed by scripts/setup) on loopback, in front of two engine stand-ins,
driven through lanes' adapter: register, serve a chat completion, remove, restart, reconcile back."""

from __future__ import annotations

import asyncio
import importlib.util
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from reconciler.gateway.router import reconcile
from reconciler.gateway.smg import SmgRouter
from reconciler.sim.engineargs import Behaviour, EngineArgs
from reconciler.sim.standin_http import Engine, StandinServer
from tests.support.smggateway import KEY, Gateway

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("smg") is None, reason="smg is not installed (scripts/setup does)"),
]

MODEL = "qwen"


@pytest.fixture
def engines() -> Iterator[list[StandinServer]]:
    servers: list[StandinServer] = []
    for _ in range(2):
        args = EngineArgs(host="127.0.0.1", port=0, model="m", served_model_name=MODEL)
        server = StandinServer(("127.0.0.1", 0), Engine(args, Behaviour(tg_tps=2000), time.monotonic()))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    yield servers
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    gw = Gateway(tmp_path)
    try:
        yield gw
    finally:
        gw.kill()


@pytest.fixture
async def router(gateway: Gateway) -> AsyncIterator[SmgRouter]:
    smg = SmgRouter(gateway.url, KEY)
    yield smg
    await smg.aclose()


async def wait_for(router: SmgRouter, urls: set[str]) -> None:
    """Until the gateway lists exactly `urls`, every one ready (its registration is a background job)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        workers = await router.list_workers()
        if {w.url for w in workers} == urls and all(w.status == "ready" for w in workers):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the gateway lists {await router.list_workers()}, not {sorted(urls)} ready")


def argv_of(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")


def served(engine: StandinServer) -> int:
    return len(engine.engine.entries())


async def chat(client: httpx.AsyncClient, gateway: Gateway) -> str:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
    answer = await client.post(gateway.url + "/v1/chat/completions", json=body, timeout=10)
    assert answer.status_code == 200, answer.text
    content: str = answer.json()["choices"][0]["message"]["content"]
    return content


async def test_routes_through_the_real_smg_survive_removal_and_restart(
    engines: list[StandinServer], gateway: Gateway, router: SmgRouter
) -> None:
    await asyncio.to_thread(gateway.start)
    assert gateway.proc is not None
    assert KEY not in argv_of(gateway.proc.pid), "the key must stay out of argv"
    urls = [f"http://127.0.0.1:{e.server_address[1]}" for e in engines]
    async with httpx.AsyncClient(trust_env=False) as client:
        assert (await client.get(gateway.url + "/workers")).status_code == 401  # the control plane needs the key

        changes = await reconcile(router, {MODEL: frozenset(urls)})
        assert sorted(changes.added) == sorted((u, MODEL) for u in urls)
        await wait_for(router, set(urls))
        assert not (await reconcile(router, {MODEL: frozenset(urls)})).changed
        for _ in range(4):
            assert await chat(client, gateway)
        assert served(engines[0]) >= 1 and served(engines[1]) >= 1  # round robin reached both

        changes = await reconcile(router, {MODEL: frozenset(urls[1:])})
        assert changes.removed == ((urls[0], MODEL),)
        await wait_for(router, set(urls[1:]))  # drained, then gone
        before = served(engines[0])
        for _ in range(3):
            assert await chat(client, gateway)
        assert served(engines[0]) == before

        gateway.kill()
        await asyncio.to_thread(gateway.start)
        assert await router.list_workers() == []  # a restarted gateway forgot its routes
        assert (await reconcile(router, {MODEL: frozenset(urls[1:])})).added == ((urls[1], MODEL),)
        await wait_for(router, set(urls[1:]))
        assert await chat(client, gateway)
