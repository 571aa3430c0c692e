"""Simulated Sparks for the example fleet, a reconciler wired to them, and a store."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.cli.demo import DemoEnv, start_sim, stop_demo
from reconciler.execute.cycle import CycleResult
from reconciler.source.loadcommit import LoadedCommit
from reconciler.spec.lane import Health
from reconciler.spec.load import DesiredState
from tests.support.example import EUGR, PRODUCTION, example_policies, example_state, with_lane

_counter = itertools.count(1)
FAST_HEALTH = Health(
    port_timeout_s=10, ready_timeout_s=10, models_timeout_s=5, completion_timeout_s=5, poll_interval_s=0.2
).model_dump()


def fast(desired: DesiredState, **health: Any) -> DesiredState:
    """Short readiness timeouts and polls so tests do not wait like a 20-minute model load."""
    for lane in (PRODUCTION, EUGR):
        desired = with_lane(desired, lane, health={**FAST_HEALTH, **health})
    return desired


def loaded(desired: DesiredState) -> LoadedCommit:
    return LoadedCommit(desired.commit, desired, example_policies())


class World:
    def __init__(self, env: DemoEnv) -> None:
        self.env = env
        self.fleet = env.fleet
        self.store = env.store
        self.state = fast(example_state())

    async def cycle(self, desired: DesiredState | None = None, *, apply: bool = True) -> CycleResult:
        if desired is not None:
            self.state = desired
        return await self.env.reconciler.run_cycle(loaded(self.state), apply=apply)

    async def docker(self, host: str, *argv: str) -> str:
        status, out, err = await self.fleet.runtime(host).execute(["docker", *argv])
        assert status == 0, err
        return out

    def containers(self, host: str) -> dict[str, dict[str, str]]:
        """name -> labels of the containers running on a simulated host."""
        out = {}
        for name, c in self.fleet.runtime(host).containers.items():
            if c.status == "running":
                out[name] = dict(c.labels)
        return out


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    n = next(_counter)
    base = f"127.{60 + (os.getpid() % 40)}.{n % 250}."
    env = await start_sim(loaded(fast(example_state())), tmp_path, base_address=base)
    try:
        yield World(env)
    finally:
        await stop_demo(env)
