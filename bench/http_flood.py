"""The daemon's HTTP server under a flood of slow clients, against the server before issue 14, uvicorn, hypercorn.

    .venv/bin/python bench/http_flood.py [--clients 400] [--seconds 20] [--servers lanes,before,uvicorn,hypercorn]
        [--before-rev 7524278] [--asgi-python /path/to/python-with-uvicorn-and-hypercorn] [--json]

Each server runs alone in a child process on a loopback port, serving /healthz and POST /webhook:

- `lanes`: `reconciler.daemon.http.HttpServer` with its default limits (as the daemon runs it);
- `before`: the same file at `--before-rev` (the server before the connection cap, issue 14);
- `uvicorn`: uvicorn (h11) with a two-route ASGI app, `limit_concurrency=64`, `timeout_keep_alive=5`,
  `h11_max_incomplete_event_size=16384`, the app refusing bodies over 1 MiB: as close to our limits as its
  settings go;
- `hypercorn`: the same app under hypercorn (asyncio, h11), which has no connection cap: its keep-alive,
  read timeout, incomplete-head size and backlog set as near our limits as they go.
The last two need a Python with uvicorn and hypercorn installed (`--asgi-python`); lanes depends on neither.

The flood: `--clients` connections, five in six dribbling a request head (a header line every 0.5 s), one in
six announcing a 1 MiB webhook body, sending all of it but the last byte at once and then stalling; each
comes back 0.3 s after the server drops it. Meanwhile a normal client asks GET /healthz every 0.2 s
(5 s timeout, a new connection each time, from a thread of its own), and the server's RSS and
descriptors are read from /proc.
Printed per server: RSS before and at peak, descriptors at peak, /healthz answered (200) out of asked,
its median and worst latency, and the bytes the server logged. Not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the slow clients are the flood test's own (tests/support/flood.py)
from tests.support.flood import proc_figures, slow_client  # noqa: E402

LANES_SERVER = """
import asyncio, sys
sys.path.insert(0, {path!r})
from {module} import HttpServer

async def webhook(headers, body):
    return 202, "ok"

async def main():
    server = HttpServer("127.0.0.1:{port}", health=lambda: (True, ""), webhook=webhook)
    await server.start()
    await asyncio.Event().wait()

asyncio.run(main())
"""

ASGI_APP = """
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    status, body = 404, b"not found\\n"
    if scope["path"] == "/healthz" and scope["method"] in ("GET", "HEAD"):
        status, body = 200, b"ok\\n"
    elif scope["path"] == "/webhook" and scope["method"] == "POST":
        size, more = 0, True
        while more:
            message = await receive()
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
            if size > 1 << 20:
                status, body = 413, b"too large\\n"
                break
        else:
            status, body = 202, b"ok\\n"
    await send({{"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]}})
    await send({{"type": "http.response.body", "body": body}})
"""

UVICORN_SERVER = (
    ASGI_APP
    + """
import uvicorn

uvicorn.run(app, host="127.0.0.1", port={port}, http="h11", limit_concurrency=64, timeout_keep_alive=5,
            h11_max_incomplete_event_size=16384, log_level="warning", access_log=False)
"""
)

# Hypercorn 0.18 has no connection cap (hypercorn/config.py: backlog, read_timeout, keep_alive_timeout,
# h11_max_incomplete_size, but nothing like uvicorn's limit_concurrency): its nearest settings are used.
HYPERCORN_SERVER = (
    ASGI_APP
    + """
import asyncio
from hypercorn.asyncio import serve
from hypercorn.config import Config

config = Config()
config.bind = ["127.0.0.1:{port}"]
config.keep_alive_timeout = 5
config.read_timeout = 10
config.h11_max_incomplete_size = 16384
config.backlog = 64
config.accesslog = None
config.loglevel = "WARNING"
asyncio.run(serve(app, config))
"""
)


@dataclass
class Result:
    server: str
    clients: int
    seconds: float
    rss_before_mb: float = 0.0
    rss_peak_mb: float = 0.0
    fds_before: int = 0
    fds_peak: int = 0
    health_asked: int = 0
    health_ok: int = 0
    health_median_ms: float = 0.0
    health_worst_ms: float = 0.0
    log_bytes: int = 0
    connections: int = 0
    dropped: int = 0
    answered: int = 0
    refused: int = 0
    alive: bool = True
    statuses: dict[str, int] = field(default_factory=dict)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_code(name: str, port: int, tmp: Path, before_rev: str) -> str:
    if name == "lanes":
        return LANES_SERVER.format(path=str(ROOT), module="reconciler.daemon.http", port=port)
    if name == "before":
        old = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{before_rev}:reconciler/daemon/http.py"],
            capture_output=True, check=True, text=True,
        ).stdout  # fmt: skip
        (tmp / "before_http.py").write_text(old)
        return LANES_SERVER.format(path=str(tmp), module="before_http", port=port)
    if name == "hypercorn":
        return HYPERCORN_SERVER.format(port=port)
    return UVICORN_SERVER.format(port=port)


def ask_health_once(port: int) -> tuple[str, float]:
    """One GET /healthz on a new connection, from a thread: a monitor outside the flood's event loop."""
    t0 = time.perf_counter()
    try:
        with httpx.Client(timeout=5) as client:
            key = str(client.get(f"http://127.0.0.1:{port}/healthz").status_code)
    except httpx.HTTPError as exc:
        key = type(exc).__name__
    return key, time.perf_counter() - t0


async def ask_health(port: int, stop: asyncio.Event, latencies: list[float], result: Result) -> None:
    while not stop.is_set():
        key, took = await asyncio.to_thread(ask_health_once, port)
        latencies.append(took)
        result.statuses[key] = result.statuses.get(key, 0) + 1
        await asyncio.sleep(0.2)


async def sample(pid: int, stop: asyncio.Event, samples: list[tuple[int, int]]) -> None:
    while not stop.is_set():
        samples.append(proc_figures(pid))
        await asyncio.sleep(0.2)


def spawn(name: str, port: int, args: argparse.Namespace, tmp: Path, log_path: Path) -> subprocess.Popen[bytes]:
    python = args.asgi_python if name in ("uvicorn", "hypercorn") else sys.executable
    with log_path.open("wb") as log:
        return subprocess.Popen([python, "-c", server_code(name, port, tmp, args.before_rev)], stdout=log, stderr=log)


async def measure(name: str, args: argparse.Namespace, tmp: Path) -> Result:
    port = free_port()
    log_path = tmp / f"{name}.log"
    proc = spawn(name, port, args, tmp, log_path)
    result = Result(name, args.clients, args.seconds)
    try:
        async with httpx.AsyncClient(timeout=1) as client:
            for _ in range(100):
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200:
                        break
                await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        rss0, fds0 = proc_figures(proc.pid)
        log0 = log_path.stat().st_size
        stop = asyncio.Event()
        latencies: list[float] = []
        samples: list[tuple[int, int]] = []
        tasks = [asyncio.create_task(slow_client(port, i % 6 == 0, stop, result)) for i in range(args.clients)]
        tasks += [
            asyncio.create_task(ask_health(port, stop, latencies, result)),
            asyncio.create_task(sample(proc.pid, stop, samples)),
        ]
        await asyncio.sleep(args.seconds)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        result.alive = proc.poll() is None
        result.rss_before_mb = rss0 / 1e6
        result.rss_peak_mb = max(r for r, _ in samples) / 1e6
        result.fds_before = fds0
        result.fds_peak = max(f for _, f in samples)
        result.health_asked = len(latencies)
        result.health_ok = result.statuses.get("200", 0)
        result.health_median_ms = statistics.median(latencies) * 1000
        result.health_worst_ms = max(latencies) * 1000
        result.log_bytes = log_path.stat().st_size - log0
    finally:
        proc.kill()
        proc.wait()
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=400)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--servers", default="lanes,before,uvicorn,hypercorn")
    parser.add_argument("--before-rev", default="7524278")
    parser.add_argument("--asgi-python", default=sys.executable, help="a Python with uvicorn and hypercorn")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="lanes-http-flood-") as tmp:
        for name in args.servers.split(","):
            results.append(await measure(name, args, Path(tmp)))
            await asyncio.sleep(1)
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
        return
    print(f"{args.clients} slow clients for {args.seconds:.0f} s on loopback")
    print(f"{'server':8} {'RSS MB':>15} {'fds':>11} {'/healthz 200':>13} {'median':>8} {'worst':>8} {'log':>10}  other")
    for r in results:
        other = {k: v for k, v in r.statuses.items() if k != "200"}
        print(
            f"{r.server:8} {r.rss_before_mb:6.1f} -> {r.rss_peak_mb:5.1f} {r.fds_before:4d} -> {r.fds_peak:4d} "
            f"{r.health_ok:5d} / {r.health_asked:<5d} {r.health_median_ms:6.0f}ms {r.health_worst_ms:6.0f}ms "
            f"{r.log_bytes:9d}B  {other or ''}{'' if r.alive else ' DIED'}"
        )


if __name__ == "__main__":
    asyncio.run(main())
