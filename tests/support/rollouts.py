"""Rollouts through a real SMG in front of simulated Sparks: a client stream, commits with rollout thresholds.

Shared by tests/daemon/test_rollouts.py and bench/gateway_rollouts.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from reconciler.gateway.smg import SmgRouter
from reconciler.source.loadcommit import load_commit
from tests.support.example import EUGR, PRODUCTION, fast_files
from tests.support.smggateway import KEY, Gateway
from tests.support.waiting import wait_for
from tests.support.world import World, control_world

MODEL = "deepseek-v4-flash"
NEW_HOSTS = ("dgx1", "dgx2", "dgx3")
MAX_REQUESTS = 4000


@dataclass
class Stream:
    """Chat completions to the gateway one after another, each answer kept as (status, Retry-After, error)."""

    url: str
    model: str = MODEL
    answers: list[tuple[int | None, str | None, str | None]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    """When each answer came (monotonic seconds), beside `answers`."""
    stopped: bool = False

    async def run(self) -> None:
        body = {"model": self.model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
            while not self.stopped and len(self.answers) < MAX_REQUESTS:
                try:
                    r = await client.post(self.url + "/v1/chat/completions", json=body)
                    self.answers.append((r.status_code, r.headers.get("retry-after"), None))
                    self.times.append(time.monotonic())
                except httpx.HTTPError as exc:
                    self.answers.append((None, None, type(exc).__name__))
                    self.times.append(time.monotonic())
                await asyncio.sleep(0.03)

    def longest_gap(self) -> float:
        """The longest time between two answers 200 in a row: how long the model was unavailable to a client."""
        served = [t for t, (status, _, _) in zip(self.times, self.answers, strict=True) if status == 200]
        return max((b - a for a, b in itertools.pairwise(served)), default=0.0)

    def statuses(self) -> Counter[int | None]:
        return Counter(status for status, _, _ in self.answers)


@contextlib.asynccontextmanager
async def streaming(gateway: Gateway, model: str = MODEL) -> AsyncIterator[Stream]:
    stream = Stream(gateway.url, model)
    task = asyncio.create_task(stream.run())
    try:
        yield stream
    finally:
        stream.stopped = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 15)


async def until_served(gateway: Gateway, what: str, timeout: float = 60, model: str = MODEL) -> None:
    """Until the gateway answers a chat completion for the model with 200."""
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.post(gateway.url + "/v1/chat/completions", json=body)).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")
            await asyncio.sleep(0.2)


async def until_settled(gateway: Gateway, what: str, timeout: float = 30, model: str = MODEL) -> None:
    """Until the gateway lists the model's engines alone: a model back from an in-place change keeps its holding
    worker registered until SMG lists the engine ready (add-first), and a request in between may still get the
    holding answer. A test that counts every answer after that starts here."""
    router = SmgRouter(gateway.url, KEY)

    async def settled() -> bool:
        with contextlib.suppress(Exception):
            mine = [w for w in await router.list_workers() if w.model == model and not w.leaving]
            return bool(mine) and all("/hold/" not in w.url and w.status == "ready" for w in mine)
        return False

    try:
        deadline = time.monotonic() + timeout
        while not await settled():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")
            await asyncio.sleep(0.2)
    finally:
        await router.aclose()


def commit(world: World, gateway: Gateway, message: str, analysis: str, **changes: Any) -> str:
    """The example state with `changes` per lane, the test gateway's metrics port and the gateway's rollout
    thresholds `analysis` (YAML lines)."""
    files = fast_files(**changes)
    fleet = files["state/fleet.yaml"].decode()
    ours = f"  port: 30000\n  metrics_port: {gateway.metrics_port}\n{analysis}"
    files["state/fleet.yaml"] = fleet.replace("  port: 30000\n", ours, 1).encode()
    head = world.repo.commit(files, message)
    world.heads.append(head)
    world.target = load_commit(world.repo.repo, head)
    return head


def free_sparks(world: World) -> None:
    """Put the nightly lane's model on dgx1-3, as staging would (they are free once the production lane stops)."""
    model = world.state.models[world.state.lanes[EUGR].model]
    for host in NEW_HOSTS:
        world.fleet.runtime(host).add_model_path(model.path, model.weight_bytes)


async def production_stopped(world: World, gateway: Gateway) -> str:
    """The production lane stopped by a commit (dgx1-4 free, the nightly lane's model on dgx1-3), the nightly
    lane served through the gateway; the commit."""
    free_sparks(world)
    stopped = world.commit("production: stopped, its Sparks free", {PRODUCTION: {"desired": "stopped"}})
    await wait_for(lambda: world.outcome(stopped) == "applied", 60, "the production lane stopped")
    await until_served(gateway, "the model served through the gateway")
    return stopped


@contextlib.asynccontextmanager
async def gateway_world(tmp: Path, salt: int, gateway: Gateway, *, owner: str = "lanes-test") -> AsyncIterator[World]:
    """The example fleet on simulated Sparks and a daemon keeping `gateway`'s routes (a 2 s interval), deployed."""
    async with control_world(tmp, salt) as world:
        d = world.add_daemon("daemon", owner=owner, log_level="info")
        d.config.write_text(
            d.config.read_text()
            + f'[gateway]\nenabled = true\nurl = "{gateway.url}"\nkey_file = "{gateway.key_file}"\ninterval_s = 2\n'
        )
        await d.start()
        await world.deployed(world.heads[0])
        yield world


def boxes(world: World, hosts: tuple[str, ...], commit: str | None = None) -> list[str]:
    out = []
    for host in hosts:
        for box in world.containers(host):
            ours = box.name.startswith(f"lanes-{EUGR}-") and box.status == "running"
            if ours and (commit is None or box.commit == commit):
                out.append(f"{box.name}@{host}")
    return out
