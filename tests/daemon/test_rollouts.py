"""Rollouts through a real SMG, with a client sending chat completions all the while (issue 26).

The daemon drives the gateway (`[gateway] enabled`) in front of the simulated Sparks; the example state routes
`deepseek-v4-flash` to the nightly lane (EUGR, dgx5-7). A client sends one chat completion to the gateway every
few tens of milliseconds during each change (bounded in count), and every answer is kept:

- in place (a new image on the same hosts): the model is away while the engine loads, and the gateway answers
  503 with `Retry-After` meanwhile, never 404 and never a refused connection;
- blue/green (the lane moved to dgx1-3, freed by stopping the production lane): every request is answered
  200, and the old ranks stop only after the watch window;
- a new spec whose engine is slow to a first token in the watch window: the traffic goes back to the old
  ranks, which never stopped, still with every request answered 200, and the commit's note says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from reconciler.source.loadcommit import load_commit
from reconciler.source.notes import read_note
from tests.support.example import EUGR, EUGR_HOSTS, EUGR_REPO, PRODUCTION, fast_files
from tests.support.smggateway import Gateway
from tests.support.waiting import wait_for
from tests.support.world import World, control_world

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("smg") is None, reason="smg is not installed (scripts/setup does)"),
]
_salt = itertools.count(231)
MODEL = "deepseek-v4-flash"
NEW_HOSTS = ("dgx1", "dgx2", "dgx3")
MAX_REQUESTS = 4000


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    gw = Gateway(tmp_path)
    gw.start()
    try:
        yield gw
    finally:
        gw.kill()


@pytest.fixture
async def world(tmp_path: Path, gateway: Gateway) -> AsyncIterator[World]:
    async with control_world(tmp_path, next(_salt)) as w:
        d = w.add_daemon("daemon", owner="lanes-test", log_level="info")
        d.config.write_text(
            d.config.read_text()
            + f'[gateway]\nenabled = true\nurl = "{gateway.url}"\nkey_file = "{gateway.key_file}"\ninterval_s = 2\n'
        )
        await d.start()
        await w.deployed(w.heads[0])
        yield w


@dataclass
class Stream:
    """Chat completions to the gateway one after another, each answer kept as (status, Retry-After, error)."""

    url: str
    answers: list[tuple[int | None, str | None, str | None]] = field(default_factory=list)
    _stop: bool = False

    async def run(self) -> None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
            while not self._stop and len(self.answers) < MAX_REQUESTS:
                try:
                    r = await client.post(self.url + "/v1/chat/completions", json=body)
                    self.answers.append((r.status_code, r.headers.get("retry-after"), None))
                except httpx.HTTPError as exc:
                    self.answers.append((None, None, type(exc).__name__))
                await asyncio.sleep(0.03)

    def statuses(self) -> Counter[int | None]:
        return Counter(status for status, _, _ in self.answers)


@contextlib.asynccontextmanager
async def streaming(gateway: Gateway) -> AsyncIterator[Stream]:
    stream = Stream(gateway.url)
    task = asyncio.create_task(stream.run())
    try:
        yield stream
    finally:
        stream._stop = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 15)


async def until_served(gateway: Gateway, what: str, timeout: float = 60) -> None:
    """Until the gateway answers a chat completion for the model with 200."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.post(gateway.url + "/v1/chat/completions", json=body)).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")
            await asyncio.sleep(0.2)


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
    """Stop the production lane (dgx1-3 free) and put the nightly lane's model there, as staging would."""
    model = world.state.models[world.state.lanes[EUGR].model]
    for host in NEW_HOSTS:
        world.fleet.runtime(host).add_model_path(model.path, model.weight_bytes)


def boxes(world: World, hosts: tuple[str, ...], commit: str | None = None) -> list[str]:
    out = []
    for host in hosts:
        for box in world.containers(host):
            ours = box.name.startswith(f"lanes-{EUGR}-") and box.status == "running"
            if ours and (commit is None or box.commit == commit):
                out.append(f"{box.name}@{host}")
    return out


async def test_in_place_answers_503_with_retry_after_while_loading_never_404_or_refused(
    world: World, gateway: Gateway
) -> None:
    await until_served(gateway, "the model served through the gateway")
    image = world.fleet.registry.add(f"{EUGR_REPO}:slow-load", env={"STANDIN_LOAD_S": "4"}).pinned
    async with streaming(gateway) as stream:
        await asyncio.sleep(1.0)
        head = commit(world, gateway, "eugr: a new build, in place", "", **{EUGR: {"image": image}})
        await wait_for(lambda: world.outcome(head) == "applied", 120, "the in-place change applied")
        await until_served(gateway, "the model served again", 30)
        await asyncio.sleep(1.0)
    statuses = stream.statuses()
    assert set(statuses) <= {200, 503}, (statuses, [a for a in stream.answers if a[0] not in (200, 503)][:5])
    assert statuses[503] > 0, statuses  # the model was away while its engine loaded
    assert all(after is not None and int(after) >= 1 for status, after, _ in stream.answers if status == 503)
    assert stream.answers[-1][0] == 200


async def test_blue_green_drops_nothing_and_stops_the_old_ranks_after_the_watch(world: World, gateway: Gateway) -> None:
    free_sparks(world)
    stopped = world.commit("production: stopped, its Sparks free", {PRODUCTION: {"desired": "stopped"}})
    await wait_for(lambda: world.outcome(stopped) == "applied", 60, "the production lane stopped")
    await until_served(gateway, "the model served through the gateway")
    analysis = "  analysis:\n    watch_s: 4\n"
    async with streaming(gateway) as stream:
        await asyncio.sleep(1.0)
        head = commit(
            world,
            gateway,
            "eugr: onto dgx1-3",
            analysis,
            **{PRODUCTION: {"desired": "stopped"}, EUGR: {"hosts": list(NEW_HOSTS)}},
        )
        await wait_for(lambda: world.in_step(EUGR, "watch"), 90, "the watch window")
        # Watched: the new ranks take the traffic while the old ones still run.
        assert boxes(world, EUGR_HOSTS), "the old ranks stopped before the watch window ended"
        await wait_for(lambda: world.outcome(head) == "applied", 90, "the blue/green change applied")
        await asyncio.sleep(1.0)
    statuses = stream.statuses()
    assert set(statuses) == {200}, (statuses, [a for a in stream.answers if a[0] != 200][:5])
    assert boxes(world, EUGR_HOSTS) == [] and len(boxes(world, NEW_HOSTS, head)) == 3
    note = read_note(world.repo.repo, head) or ""
    assert "promoted after its watch window" in note, note


async def test_a_new_spec_slow_in_the_watch_window_is_aborted_back_with_nothing_dropped(
    world: World, gateway: Gateway
) -> None:
    free_sparks(world)
    stopped = world.commit("production: stopped, its Sparks free", {PRODUCTION: {"desired": "stopped"}})
    await wait_for(lambda: world.outcome(stopped) == "applied", 60, "the production lane stopped")
    await until_served(gateway, "the model served through the gateway")
    old = world.heads[0]
    # A build that reads prompts at 2 tokens/s: its first token takes a second or more, over the lane's 0.3 s.
    slow = world.fleet.registry.add(f"{EUGR_REPO}:slow", env={"STANDIN_PP_TPS": "2"}).pinned
    analysis = f"  analysis:\n    watch_s: 30\n  lanes:\n    {EUGR}:\n      watch_s: 30\n      max_ttft_s: 0.3\n"
    async with streaming(gateway) as stream:
        await asyncio.sleep(1.0)
        started = time.monotonic()
        head = commit(
            world,
            gateway,
            "eugr: a slow build onto dgx1-3",
            analysis,
            **{PRODUCTION: {"desired": "stopped"}, EUGR: {"hosts": list(NEW_HOSTS), "image": slow}},
        )
        await wait_for(lambda: world.outcome(head) not in (None, "applying"), 120, "the change's outcome")
        await asyncio.sleep(1.0)
    assert world.outcome(head) == "failed", world.commit_outcome(head)
    assert time.monotonic() - started < 30 + 60, "aborted at once, not after the whole window"
    statuses = stream.statuses()
    assert set(statuses) == {200}, (statuses, [a for a in stream.answers if a[0] != 200][:5])
    # The old ranks never stopped and serve on; the new ones are gone.
    assert len(boxes(world, EUGR_HOSTS, old)) == 3 and boxes(world, NEW_HOSTS) == []
    health, _ = world.health(EUGR)
    assert health == "degraded"
    note = read_note(world.repo.repo, head) or ""
    assert "watch window" in note and "went back to the old ranks" in note, note
