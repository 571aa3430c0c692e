"""A shutdown's cancel stays a shutdown even when a library turns it into an error.

httpx can raise ConnectError instead of CancelledError when the task is cancelled
while it connects (encode/httpx#2381). CI once caught the daemon waiting out a
whole readiness timeout after SIGTERM and recording a rollback because of it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from reconciler.execute import gate as gate_module
from reconciler.execute.readiness import GateResult, wait_ready
from reconciler.spec.lane import Health
from tests.support.example import FAST_HEALTH, PRODUCTION, with_lane
from tests.support.world import World

pytestmark = pytest.mark.timeout(60)


async def _connect_that_turns_cancel_into_error(self: Any, request: httpx.Request) -> httpx.Response:
    """A connect that hangs for a second, then fails; cancelled meanwhile, it fails the same way."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(1)
    raise httpx.ConnectError("All connection attempts failed")


@pytest.fixture
async def open_port() -> AsyncIterator[int]:
    """A port that accepts connections, so the gate gets past its port stage to the HTTP probes."""
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def test_a_readiness_gate_that_is_cancelled_mid_connect_stops(
    open_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(httpx.AsyncHTTPTransport, "handle_async_request", _connect_that_turns_cancel_into_error)
    health = Health(port_timeout_s=8, ready_timeout_s=8, poll_interval_s=0.05)
    gate = asyncio.create_task(wait_ready("127.0.0.1", open_port, "m", health))
    await asyncio.sleep(0.3)
    gate.cancel()
    await asyncio.wait({gate}, timeout=5)
    try:
        # Before the fix the gate polled on until its own 8 s timeout and returned a failed gate.
        assert gate.done(), "the gate went on polling after it was cancelled"
        assert gate.cancelled()
    finally:
        await asyncio.wait({gate})  # a gate that swallowed the cancel still ends at its own timeout


async def test_a_transaction_whose_gate_swallows_the_cancel_still_takes_the_shutdown_path(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    await world.cycle()
    old = {h: set(world.labels(h)) for h in ("dgx1", "dgx2", "dgx3", "dgx4")}
    slow = world.fleet.registry.add("aidendle94/sparkrun-sglang-dsv41-gb10:slow", env={"STANDIN_LOAD_S": "60"}).pinned
    gate_entered = asyncio.Event()

    async def gate_that_swallows_cancel(*args: Any, **kwargs: Any) -> GateResult:
        gate_entered.set()
        try:
            return await wait_ready(*args, **kwargs)
        except asyncio.CancelledError:
            return GateResult(False, "health", "ConnectError: All connection attempts failed", {})

    monkeypatch.setattr(gate_module, "wait_ready", gate_that_swallows_cancel)
    slow_health = {**FAST_HEALTH, "ready_timeout_s": 120}
    cycle = asyncio.create_task(world.cycle(with_lane(world.state, PRODUCTION, image=slow, health=slow_health)))
    await asyncio.wait_for(gate_entered.wait(), 30)
    cycle.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(cycle, 20)
    record = world.store.lane(PRODUCTION)
    assert record is not None
    # Not "degraded" with a rollback the operator never asked for: the previous spec is back and
    # its readiness is left to the next cycle, as for any shutdown mid-transaction.
    assert record.health == "progressing", record.last_error
    assert record.last_error is not None and "interrupted by shutdown" in record.last_error
    for host, names in old.items():
        assert set(world.labels(host)) == names, host
    assert not world.store.in_flight()
