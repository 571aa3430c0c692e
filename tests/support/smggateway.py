"""The real SMG (smg 1.13.0, installed by scripts/setup) on loopback ports, started through lanes' launcher with
its admin key in a file, as lanes-gateway.service starts it; killed by its pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

KEY = "lanes-test-key-0123456789"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Gateway:
    """SMG started through lanes' launcher (the key from a file), on loopback ports; killed by its pid."""

    def __init__(self, tmp: Path, port: int | None = None) -> None:
        self.port, self.metrics_port = port or free_port(), free_port()
        self.key_file = tmp / "gateway-key"
        self.key_file.write_text(KEY + "\n")
        self.log = tmp / "smg.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        argv = [
            sys.executable, "-m", "reconciler.gateway.launch", "--key-file", str(self.key_file), "--",
            "--host", "127.0.0.1", "--port", str(self.port),
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(self.metrics_port),
            "--policy", "round_robin", "--disable-tokenizer-autoload",
            "--health-check-interval-secs", "1", "--log-level", "warn",
        ]  # fmt: skip
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "NO_COLOR": "1"}
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"smg exited: {self.log.read_text()[-2000:]}"
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"smg did not answer /health in 30 s: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None
