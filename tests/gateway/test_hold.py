"""The holding answer: 503 with Retry-After for a model that is away, an engine's health and models otherwise."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import httpx
import pytest

from reconciler.gateway.control import parse_figures
from reconciler.gateway.hold import HoldServer, token

pytestmark = pytest.mark.timeout(20)
MODEL = "Qwen/Qwen3-235B-A22B-FP8"


@pytest.fixture
async def hold() -> AsyncIterator[HoldServer]:
    server = HoldServer()
    await server.start()
    try:
        yield server
    finally:
        await server.close()


async def test_a_model_away_answers_503_with_retry_after_counting_down(hold: HoldServer) -> None:
    hold.set_away({MODEL: time.time() + 300})
    url = hold.url(MODEL)
    assert url.endswith(f"/hold/{token(MODEL, 1)}") and "/" not in token(MODEL, 1)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(trust_env=False) as client:
        # SMG checks a worker's health and lists its models before it routes to it: answered as an engine would.
        assert (await client.get(url + "/health")).status_code == 200
        models = (await client.get(url + "/v1/models")).json()
        assert [m["id"] for m in models["data"]] == [MODEL]
        answer = await client.post(url + "/v1/chat/completions", json=body)
        assert answer.status_code == 503
        assert 295 <= int(answer.headers["retry-after"]) <= 300
        assert answer.json()["error"]["code"] == "model_loading"
        # Expected back already: never less than a second.
        hold.set_away({MODEL: time.time() - 10})
        again = await client.post(url + "/v1/chat/completions", json=body)
        assert again.status_code == 503 and again.headers["retry-after"] == "1"
        # No longer away: still 503 (the gateway may route here until the lane's own worker is ready), never 404.
        hold.set_away({})
        assert (await client.post(url + "/v1/chat/completions", json=body)).status_code == 503
        # Away again: a URL of its own (SMG keeps a removed worker's URL draining), the old one still answered.
        hold.set_away({MODEL: time.time() + 30})
        assert hold.url(MODEL) != url
        assert (await client.post(hold.url(MODEL) + "/v1/chat/completions", json=body)).status_code == 503
        assert (await client.post(url + "/v1/chat/completions", json=body)).status_code == 503
        # A model never held: 404.
        other = hold.url("glm-5.3")
        assert (await client.post(other + "/v1/chat/completions", json=body)).status_code == 404
        assert (await client.get(other + "/health")).status_code == 404


async def test_an_oversized_or_chunked_body_closes_the_connection(hold: HoldServer) -> None:
    hold.set_away({MODEL: time.time() + 60})
    async with httpx.AsyncClient(trust_env=False) as client:
        with pytest.raises(httpx.HTTPError):
            await client.post(hold.url(MODEL) + "/v1/chat/completions", content=b"x" * (2 * 1024 * 1024))

        async def chunks() -> AsyncIterator[bytes]:
            yield b"{}"

        with pytest.raises(httpx.HTTPError):
            await client.post(hold.url(MODEL) + "/v1/chat/completions", content=chunks())


def test_a_workers_figures_are_read_from_smgs_series_and_other_workers_are_not_counted() -> None:
    text = "\n".join(
        [
            "# HELP smg_worker_requests_active Currently running requests per worker",
            'smg_worker_requests_active{worker="http://10.0.0.1:8000"} 3',
            'smg_worker_requests_active{worker="http://10.0.0.2:8000"} 9',
            'smg_worker_cb_outcomes_total{worker="http://10.0.0.1:8000",outcome="success"} 120',
            'smg_worker_cb_outcomes_total{worker="http://10.0.0.1:8000",outcome="failure"} 4',
            'smg_worker_cb_outcomes_total{worker="http://10.0.0.2:8000",outcome="failure"} 50',
            'smg_worker_requests_active{worker="http://10.0.0.1:8000"} NaN',
        ]
    )
    figures = parse_figures(text, "http://10.0.0.1:8000")
    assert (figures.active, figures.successes, figures.failures) == (3, 120, 4)
    assert parse_figures(text, "http://10.0.0.9:8000") == parse_figures("", "x")
