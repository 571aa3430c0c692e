"""Fixtures for the upstream watch: local servers, a virtual clock, a store, settings."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest
import structlog

from reconciler.upstream.base import Clock, PollSettings
from reconciler.upstream.store import UpstreamStore
from tests.upstream.servers import App, LocalServer

NOW = 1_900_000_000.0
"""Virtual time of the tests (2030): far from the real clock, so a test cannot lean on it by accident."""


class VirtualClock:
    """Time that moves only when slept through or advanced, with a seeded jitter."""

    def __init__(self, start: float = NOW) -> None:
        self.t = start
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds

    def advance(self, seconds: float) -> None:
        self.t += seconds

    def clock(self) -> Clock:
        return Clock(now=self.now, sleep=self.sleep, rng=random.Random(7))


@pytest.fixture(autouse=True)
def plain_structlog() -> Iterator[None]:
    """CLI tests configure structlog onto the runner's stderr, which closes after them: start and end clean."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


@pytest.fixture
def serve() -> Iterator[Callable[[App], LocalServer]]:
    started: list[LocalServer] = []

    def start(app: App) -> LocalServer:
        server = LocalServer(app)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture
def vclock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[UpstreamStore]:
    with UpstreamStore(tmp_path / "lanes.db") as s:
        yield s


@pytest.fixture
def settings(tmp_path: Path) -> PollSettings:
    creds = tmp_path / "credentials"
    creds.mkdir(exist_ok=True)
    return PollSettings(data_dir=tmp_path / "upstream", credentials_dir=creds, page_size=2, backoff_cap_s=600)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as c:
        yield c
