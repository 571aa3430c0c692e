"""The daemon's HTTP endpoint on an ephemeral loopback port, and the metrics it serves."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from reconciler.daemon.http import HttpServer, Limits, is_loopback, parse_listen
from reconciler.daemon.metrics import Metrics
from tests.support.httpserver import ROWS, Hooks, raw

LIMITS = Limits(head_timeout_s=0.5, body_timeout_s=0.5, handler_timeout_s=0.5, max_connections=4)


@pytest.fixture
async def served() -> AsyncIterator[tuple[HttpServer, Hooks]]:
    hooks = Hooks(metrics=Metrics())
    server = HttpServer(
        "127.0.0.1:0",
        health=hooks.health,
        status=hooks.status,
        metrics=hooks.render,
        webhook=hooks.webhook,
        limits=LIMITS,
    )
    await server.start()
    try:
        yield server, hooks
    finally:
        await server.close()


# -- routes -------------------------------------------------------------------------------


async def test_healthz_status_and_metrics(served: tuple[HttpServer, Hooks]) -> None:
    server, hooks = served
    assert server.port != 0 and server.url == f"http://127.0.0.1:{server.port}"
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.get("/healthz")
        assert (r.status_code, r.text) == (200, "ok\n")
        assert r.headers["connection"] == "close"
        hooks.ok, hooks.detail = False, "main loop stalled for 95 s"
        r = await client.get("/healthz")
        assert (r.status_code, r.text) == (503, "unhealthy: main loop stalled for 95 s\n")

        r = await client.get("/status?verbose=1")
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert r.json() == {"lanes": ROWS}

        assert hooks.metrics is not None
        hooks.metrics.update_from_status(ROWS)
        r = await client.get("/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=")
        assert 'lanes_lanes{health="healthy"} 1.0' in r.text


async def test_head_gets_headers_only(served: tuple[HttpServer, Hooks]) -> None:
    server, _ = served
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.head("/healthz")
        assert r.status_code == 200 and r.content == b"" and r.headers["content-length"] == "3"


async def test_unknown_paths_and_wrong_methods(served: tuple[HttpServer, Hooks]) -> None:
    server, _ = served
    async with httpx.AsyncClient(base_url=server.url) as client:
        assert (await client.get("/")).status_code == 404
        assert (await client.get("/metrics/../etc/passwd")).status_code == 404
        r = await client.post("/healthz", content=b"x")
        assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
        r = await client.get("/webhook")
        assert r.status_code == 405 and r.headers["allow"] == "POST"


async def test_webhook_hands_headers_and_body_over(served: tuple[HttpServer, Hooks]) -> None:
    server, hooks = served
    payload = json.dumps({"ref": "refs/heads/main", "after": "c" * 40}).encode()
    headers = {"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=00ff", "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post("/webhook", content=payload, headers=headers)
    assert (r.status_code, r.text) == (202, "fetch scheduled\n")
    assert hooks.webhook_calls is not None
    [(got_headers, body)] = hooks.webhook_calls
    assert body == payload
    assert got_headers["x-github-event"] == "push" and got_headers["x-hub-signature-256"] == "sha256=00ff"
    hooks.webhook_answer = (401, "bad signature")
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post("/webhook", content=payload)
    assert (r.status_code, r.text) == (401, "bad signature\n")


async def test_webhook_body_limit_is_one_mebibyte(served: tuple[HttpServer, Hooks]) -> None:
    server, hooks = served
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post("/webhook", content=b"x" * (1 << 20))
        assert r.status_code == 202
        r = await client.post("/webhook", content=b"x" * ((1 << 20) + 1))
        assert r.status_code == 413
    assert hooks.webhook_calls is not None and len(hooks.webhook_calls) == 1


async def test_webhook_without_length_or_chunked_is_refused(served: tuple[HttpServer, Hooks]) -> None:
    server, _ = served
    out = await raw(server, b"POST /webhook HTTP/1.1\r\nHost: x\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 411 ")
    out = await raw(server, b"POST /webhook HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 501 ")


async def test_handler_errors_and_timeouts_cost_one_response(served: tuple[HttpServer, Hooks]) -> None:
    server, hooks = served
    hooks.status_fails = True
    hooks.webhook_delay_s = 5
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.get("/status")
        assert (r.status_code, r.text) == (500, "internal server error\n")
        assert "database is locked" not in r.text
        r = await client.post("/webhook", content=b"{}")
        assert r.status_code == 504
        assert (await client.get("/healthz")).status_code == 200


async def test_webhook_handler_answering_nonsense_is_a_500(served: tuple[HttpServer, Hooks]) -> None:
    server, hooks = served
    hooks.webhook_answer = (42, "?")
    async with httpx.AsyncClient(base_url=server.url) as client:
        assert (await client.post("/webhook", content=b"{}")).status_code == 500


# -- robustness ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GARBAGE\r\n\r\n",
        b"GET /healthz\r\n\r\n",
        b"GET healthz HTTP/1.1\r\n\r\n",
        b"GET /healthz SPDY/3\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\n Folded: x\r\n\r\n",
        b"POST /webhook HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
    ],
)
async def test_malformed_requests_get_400(served: tuple[HttpServer, Hooks], request_bytes: bytes) -> None:
    server, _ = served
    out = await raw(server, request_bytes)
    assert out.startswith(b"HTTP/1.1 400 "), out


async def test_oversized_headers_get_431(served: tuple[HttpServer, Hooks]) -> None:
    server, _ = served
    out = await raw(server, b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 431 ")


async def test_slow_clients_time_out(served: tuple[HttpServer, Hooks]) -> None:
    server, _ = served
    out = await raw(server, b"GET /healthz HTTP/1.1\r\n", close_write=False)
    assert out.startswith(b"HTTP/1.1 408 ")
    out = await raw(server, b"POST /webhook HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc", close_write=False)
    assert out.startswith(b"HTTP/1.1 408 ")


async def test_a_client_that_hangs_up_early_does_not_hurt(served: tuple[HttpServer, Hooks]) -> None:
    server, _ = served
    out = await raw(server, b"GET /heal")
    assert out == b""
    async with httpx.AsyncClient(base_url=server.url) as client:
        assert (await client.get("/healthz")).status_code == 200


async def test_connections_beyond_the_limit_never_exceed_it(served: tuple[HttpServer, Hooks]) -> None:
    """More in tests/daemon/test_http_abuse.py: at the cap the client waiting longest for its head gives way."""
    server, _ = served
    idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(LIMITS.max_connections + 3)]
    await asyncio.sleep(0.05)
    assert server.open_connections == LIMITS.max_connections
    out = await raw(server, b"GET /healthz HTTP/1.1\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200 ")
    for _, writer in idle:
        writer.close()
        await writer.wait_closed()


async def test_close_ends_open_connections_and_frees_the_port() -> None:
    server = HttpServer("127.0.0.1:0", health=lambda: (True, ""))
    await server.start()
    port = server.port
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    await asyncio.sleep(0.05)
    await asyncio.wait_for(server.close(), 2)
    await server.close()  # twice is fine
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", port)
    writer.close()


async def test_routes_without_handlers_are_404() -> None:
    server = HttpServer("[::1]:0", health=lambda: (True, "generation 3"))
    try:
        await server.start()
    except OSError:
        pytest.skip("no IPv6 loopback here")
    try:
        assert server.url.startswith("http://[::1]:")
        async with httpx.AsyncClient(base_url=server.url) as client:
            assert (await client.get("/healthz")).text == "ok: generation 3\n"
            for path in ("/status", "/metrics"):
                assert (await client.get(path)).status_code == 404
            assert (await client.post("/webhook", content=b"{}")).status_code == 404
    finally:
        await server.close()


def test_listen_parsing_and_loopback() -> None:
    assert parse_listen("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_listen("[::1]:0") == ("::1", 0)
    assert parse_listen("control.lan:80") == ("control.lan", 80)
    for bad in ("9464", ":9464", "[::1]", "[nope]:1", "::1:9464", "h:99999", "h:x"):
        with pytest.raises(ValueError, match=r"PORT|port"):
            parse_listen(bad)
    assert is_loopback("127.0.0.2") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1") and not is_loopback("control.lan")


# -- metrics ------------------------------------------------------------------------------


@dataclass
class Result:
    lane: str
    result: str


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body, _ = metrics.render()
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_lane_gauges_follow_the_status_rows() -> None:
    m = Metrics()
    m.update_from_status(ROWS)
    got = samples(m)
    assert got[("lanes_lanes", (("health", "healthy"),))] == 1
    assert got[("lanes_lanes", (("health", "failed"),))] == 1
    assert got[("lanes_lanes", (("health", "degraded"),))] == 0
    assert got[("lanes_lane_health", (("health", "failed"), ("lane", "eugr")))] == 1
    assert got[("lanes_lane_health", (("health", "healthy"), ("lane", "eugr")))] == 0
    m.update_from_status(ROWS[:1])
    got = samples(m)
    assert got[("lanes_lanes", (("health", "failed"),))] == 0
    assert not any(name == "lanes_lane_health" and ("lane", "eugr") in labels for name, labels in got)


def test_cycles_count_transactions_not_steady_states() -> None:
    m = Metrics()
    m.record_cycle(12.5, [Result("a", "applied"), Result("b", "noop"), Result("c", "denied")], finished=1000.0)
    m.record_cycle(30.0, [Result("a", "rolled-back"), Result("d", "failed"), Result("e", "stopped")])
    m.record_cycle(0.2, [], error="commit could not be loaded")
    got = samples(m)
    assert got[("lanes_reconcile_cycles_total", (("outcome", "ok"),))] == 1
    assert got[("lanes_reconcile_cycles_total", (("outcome", "failed"),))] == 1
    assert got[("lanes_reconcile_cycles_total", (("outcome", "error"),))] == 1
    assert got[("lanes_lane_applies_total", (("lane", "a"), ("result", "applied")))] == 1
    assert got[("lanes_lane_applies_total", (("lane", "a"), ("result", "rolled-back")))] == 1
    assert got[("lanes_lane_applies_total", (("lane", "e"), ("result", "stopped")))] == 1
    assert not any(name == "lanes_lane_applies_total" and ("lane", "b") in labels for name, labels in got)
    assert not any(name == "lanes_lane_applies_total" and ("lane", "c") in labels for name, labels in got)
    assert got[("lanes_lane_failures_total", (("lane", "a"),))] == 1
    assert got[("lanes_lane_failures_total", (("lane", "d"),))] == 1
    assert got[("lanes_last_reconcile_duration_seconds", ())] == 0.2
    assert got[("lanes_last_reconcile_timestamp_seconds", ())] > 1000.0
    assert got[("lanes_reconcile_duration_seconds_count", ())] == 3


def test_denials_upstream_gaps_and_separate_registries() -> None:
    m = Metrics()
    m.record_denials(["memory-budget", "memory-budget", "image-digest"])
    m.set_upstream_gaps({"dsv41": (3, 12.5), "eugr": (0, 0.0)})
    m.set_upstream_gaps({"dsv41": (4, 13.0)})
    got = samples(m)
    assert got[("lanes_policy_denials_total", (("rule", "memory-budget"),))] == 1
    assert got[("lanes_policy_denials_total", (("rule", "image-digest"),))] == 1
    assert got[("lanes_upstream_releases_behind", (("lane", "dsv41"),))] == 4
    assert got[("lanes_upstream_days_behind", (("lane", "dsv41"),))] == 13.0
    assert ("lanes_upstream_releases_behind", (("lane", "eugr"),)) not in got
    assert got[("lanes_build_info", (("version", "0.1.0"),))] == 1
    assert ("lanes_policy_denials_total", (("rule", "memory-budget"),)) not in samples(Metrics())
