"""Engine stand-ins on 127.0.0.1 for the benchmark tests: as real processes, or served from the test's process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from reconciler.sim.engineargs import Behaviour, scan_engine_argv
from reconciler.sim.standin_http import Engine, StandinServer

ROOT = Path(__file__).resolve().parents[2]
MODEL = "bench-model"

StartStandin = Callable[..., str]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_ready(url: str, proc: subprocess.Popen[bytes], within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"stand-in exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"stand-in at {url} not ready within {within} s")


@pytest.fixture(scope="module")
def start_standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartStandin]:
    """Start stand-ins (served model `bench-model`); each is ended by pid and reaped at teardown."""
    started: list[subprocess.Popen[bytes]] = []
    logs = tmp_path_factory.mktemp("standin")

    def start(model: str = MODEL, **env: str) -> str:
        port = free_port()
        full_env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), **env}
        argv = [sys.executable, "-m", "reconciler.sim.standin", "--bind", "127.0.0.1", "--"]
        argv += ["vllm", "serve", f"/models/{model}", "--port", str(port), "--served-model-name", model]
        with (logs / f"standin-{port}.log").open("wb") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=full_env)
        started.append(proc)
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url, proc)
        return url

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


ServeEngine = Callable[..., str]


@pytest.fixture(scope="module")
def serve_engine() -> Iterator[ServeEngine]:
    """Stand-in engines served from this process on 127.0.0.1, each started from an engine's own argv.

    The argv is what the stand-in reads an engine's decoding from (speculative tokens
    per step, prefix caching); served here because `python -m reconciler.sim.standin`
    does not yet hand its argv to `Engine`. Each server is shut down and closed at teardown.
    """
    servers: list[StandinServer] = []
    threads: list[threading.Thread] = []

    def serve(argv: list[str], pp_tps: float = 1000.0, tg_tps: float = 1000.0) -> str:
        engine = Engine(scan_engine_argv(argv), Behaviour(pp_tps=pp_tps, tg_tps=tg_tps), time.monotonic(), argv)
        server = StandinServer(("127.0.0.1", 0), engine)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        servers.append(server)
        threads.append(thread)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()
    for thread in threads:
        thread.join(5)
