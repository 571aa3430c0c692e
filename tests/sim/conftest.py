"""Shared fixtures for the simulator tests: free ports, a stand-in spawner, a registry, polling."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from reconciler.sim.registry import SimRegistry

ROOT = str(Path(__file__).resolve().parents[2])

Eventually = Callable[[Callable[[], Awaitable[bool]], float], Awaitable[None]]
Spawn = Callable[..., subprocess.Popen[bytes]]


def free_port() -> int:
    """A port free on every address (bound on 0.0.0.0), so any loopback address can use it."""
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        port: int = s.getsockname()[1]
        return port


def process_gone(pid: int) -> bool:
    """True when `pid` is neither running nor a zombie (it was killed and reaped)."""
    return not Path(f"/proc/{pid}").exists()


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def registry() -> SimRegistry:
    return SimRegistry()


async def _eventually(check: Callable[[], Awaitable[bool]], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within} s")
        await asyncio.sleep(0.02)


@pytest.fixture
def eventually() -> Eventually:
    return _eventually


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """Start stand-in processes; every one is ended (by pid) and reaped at teardown."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        full_env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": ROOT, **(env or {})}
        log = (tmp_path / f"standin-{len(started)}.log").open("wb")
        with log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "reconciler.sim.standin", *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=full_env,
            )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
