"""`lanes demo`'s gateway: the real SMG on loopback in front of the simulated Sparks, as lanes-gateway.service runs it.

Started through lanes' launcher (`python -m reconciler.gateway.launch`, its admin key in a file of the demo's
folder), on free loopback ports, and stopped by its own pid when the demo ends. Without `smg` installed the
demo runs as before, without a gateway, and says so.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

START_S = 30.0
"""The longest SMG may take to answer /health (it starts in about a second)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class DemoGateway:
    proc: subprocess.Popen[bytes]
    port: int
    metrics_port: int
    key_file: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def start_gateway(workdir: Path) -> DemoGateway | None:
    """SMG on free loopback ports, answering /health; None when `smg` is not installed (or did not start)."""
    if importlib.util.find_spec("smg") is None:
        return None
    key_file = workdir / "gateway-key"
    key_file.write_text(secrets.token_hex(24) + "\n")
    key_file.chmod(0o600)
    port, metrics_port = _free_port(), _free_port()
    argv = [
        sys.executable, "-m", "reconciler.gateway.launch", "--key-file", str(key_file), "--",
        "--host", "127.0.0.1", "--port", str(port),
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port),
        "--disable-tokenizer-autoload", "--health-check-interval-secs", "2", "--log-level", "warn",
    ]  # fmt: skip
    with (workdir / "smg.log").open("ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    gateway = DemoGateway(proc, port, metrics_port, key_file)
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(gateway.url + "/health", timeout=1, trust_env=False).status_code == 200:
                return gateway
        time.sleep(0.2)
    gateway.stop()
    return None
