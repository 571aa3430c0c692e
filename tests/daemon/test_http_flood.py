"""The real daemon process under abuse on loopback: a bounded flood of slow clients, and webhook deliveries
that are malformed, replayed, or a GET with a body.

The flood: SLOW_CLIENTS connections that dribble a request head (one in six sends all of a 1 MiB webhook
body but its last byte, then stalls) and reconnect when dropped, for FLOOD_S seconds. Meanwhile a normal
client asks /healthz every 0.2 s, and the daemon's RSS and open descriptors are read from /proc. Figures
are printed, not timed: `bench/http_flood.py` measures them.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from reconciler.source.webhook import sign
from tests.support.flood import proc_figures, slow_client
from tests.support.lanesproc import WEBHOOK_SECRET
from tests.support.waiting import wait_for
from tests.support.world import daemon_world

pytestmark = [pytest.mark.timeout(150), pytest.mark.slow]

SLOW_CLIENTS = 300
FLOOD_S = 8.0
MAX_CONNECTIONS = 64  # the daemon's default [http] max_connections
MAX_BODIES = 8  # reconciler.daemon.http.Limits.max_bodies


@dataclass
class Flood:
    connections: int = 0
    dropped: int = 0
    answered: int = 0
    refused: int = 0
    health: list[tuple[int, float]] = field(default_factory=list)
    samples: list[tuple[int, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def ask_health_once(port: int) -> tuple[int, float, str]:
    """One GET /healthz on a new connection, from a thread: a monitor outside the flood's event loop."""
    t0 = time.perf_counter()
    try:
        with httpx.Client(timeout=5) as client:
            r = client.get(f"http://127.0.0.1:{port}/healthz")
        return r.status_code, time.perf_counter() - t0, ""
    except httpx.HTTPError as exc:
        return 0, time.perf_counter() - t0, repr(exc)


async def ask_health(port: int, stop: asyncio.Event, flood: Flood) -> None:
    while not stop.is_set():
        status, took, error = await asyncio.to_thread(ask_health_once, port)
        flood.health.append((status, took))
        if error:
            flood.errors.append(error)
        await asyncio.sleep(0.2)


async def sample(pid: int, stop: asyncio.Event, flood: Flood) -> None:
    while not stop.is_set():
        flood.samples.append(proc_figures(pid))
        await asyncio.sleep(0.2)


async def test_a_flood_of_slow_clients_leaves_healthz_answering_and_the_daemon_bounded(tmp_path: Path) -> None:
    async with daemon_world(tmp_path, 237, log_level="info") as world:
        daemon = world.daemon
        assert daemon.proc is not None
        pid, port = daemon.proc.pid, daemon.port
        rss0, fds0 = proc_figures(pid)
        log0 = daemon.log.stat().st_size
        lines0 = len(daemon.log.read_text(errors="replace").splitlines())
        flood = Flood()
        stop = asyncio.Event()
        clients = [asyncio.create_task(slow_client(port, i % 6 == 0, stop, flood)) for i in range(SLOW_CLIENTS)]
        watchers = [asyncio.create_task(ask_health(port, stop, flood)), asyncio.create_task(sample(pid, stop, flood))]
        try:
            await asyncio.sleep(FLOOD_S)
        finally:
            stop.set()
            await asyncio.gather(*clients, *watchers, return_exceptions=True)
        rss_peak = max(r for r, _ in flood.samples)
        fds_peak = max(f for _, f in flood.samples)
        new_lines = daemon.log.read_text(errors="replace").splitlines()[lines0:]
        http_lines = [line for line in new_lines if '"http.' in line]
        latencies = sorted(t for _, t in flood.health)
        print(
            f"\n{SLOW_CLIENTS} slow clients for {FLOOD_S:.0f} s: {flood.connections} connections, "
            f"{flood.dropped} dropped by the daemon, {flood.answered} answered; "
            f"RSS {rss0 / 2**20:.0f} -> peak {rss_peak / 2**20:.0f} MiB, descriptors {fds0} -> peak {fds_peak}; "
            f"/healthz {len(flood.health)} asks, median {latencies[len(latencies) // 2] * 1000:.0f} ms, "
            f"max {latencies[-1] * 1000:.0f} ms; log +{daemon.log.stat().st_size - log0} bytes, "
            f"{len(new_lines)} lines ({len(http_lines)} from the HTTP server)"
        )
        assert daemon.running
        # Asked again and again during the flood (not a figure of speed: how many asks fit is the machine's),
        # and every ask answered.
        assert len(flood.health) >= 2
        assert {status for status, _ in flood.health} == {200}, (flood.errors, flood.health)
        # The cap holds before anything is read: descriptors grow by the cap and a few closing (the listener's
        # backlog is the kernel's, not ours). The slow clients alone would have needed 300 more.
        assert fds_peak <= fds0 + MAX_CONNECTIONS + 32, (fds0, fds_peak)
        # Memory is bounded by the cap: heads are at most 2 x 16 KiB each, uploads at most MAX_BODIES x 1 MiB.
        assert rss_peak - rss0 < 64 * 2**20, (rss0, rss_peak)
        # No log flood: a throttled line or two at most.
        assert len(http_lines) <= 4, http_lines
        assert not [line for line in new_lines if "Too many open files" in line or "Traceback" in line]
        # The slots come back once the flood ends.
        await wait_for(lambda: proc_figures(pid)[1] <= fds0 + 4, 20, "descriptors back after the flood")


async def test_malformed_replayed_and_get_with_body_through_the_daemon(tmp_path: Path) -> None:
    async with daemon_world(tmp_path, 238, log_level="info") as world:
        port = world.daemon.port
        url = f"http://127.0.0.1:{port}/webhook"
        secret = WEBHOOK_SECRET.encode()

        def headers(body: bytes, delivery: str) -> dict[str, str]:
            return {
                "X-GitHub-Event": "push",
                "X-GitHub-Delivery": delivery,
                "X-Hub-Signature-256": "sha256=" + sign(body, secret),
                "Content-Type": "application/json",
            }

        malformed = b'{"ref": "refs/heads/main", "after": '
        good = json.dumps({"ref": "refs/heads/main", "after": world.repo.head(), "repository": {}}).encode()
        async with httpx.AsyncClient(timeout=10) as client:
            r_malformed = await client.post(url, content=malformed, headers=headers(malformed, "d-1"))
            r_good = await client.post(url, content=good, headers=headers(good, "d-2"))
            r_replay = await client.post(url, content=good, headers=headers(good, "d-2"))
            r_fresh_id = await client.post(url, content=good, headers=headers(good, "d-3"))
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody")
        writer.write_eof()
        get_with_body = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert (r_malformed.status_code, r_malformed.text.split(":")[0]) == (400, "malformed push payload")
        assert (r_good.status_code, r_good.text) == (202, "fetch scheduled\n")
        assert (r_replay.status_code, r_replay.text) == (409, "delivery already received\n")
        assert r_fresh_id.status_code == 409
        assert get_with_body.startswith(b"HTTP/1.1 400 "), get_with_body
        log = world.daemon.log.read_text(errors="replace")
        assert "Traceback" not in log and not world.daemon.events("http.handler_failed")
        assert [e["delivery"] for e in world.daemon.events("webhook.replayed")] == ["d-2", "d-3"]
