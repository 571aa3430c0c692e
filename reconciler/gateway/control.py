"""What a rollout asks of the gateway while it runs: settle the routes now, and the figures of one worker.

A transaction that drains a lane or watches a blue/green change records its phase in the lane's state, from
which the routes derive (`reconciler.lane.LaneState.route`); `settle` makes the gateway hold them before the
transaction goes on (the daemon's routes pass, awaited). The figures are SMG's own Prometheus series per
worker URL (read from smg 1.13.0's /metrics, checked against the real binary by tests/gateway):

- `smg_worker_requests_active{worker="URL"}`: requests running on the worker now (a drain waits for 0);
- `smg_worker_cb_outcomes_total{worker="URL",outcome="success"|"failure"}`: the circuit breaker's count of
  the worker's answers, a failure being a 408/429/5xx or a connection error (a watch window's error rate).
"""

from __future__ import annotations

import asyncio
import math
import re
from dataclasses import dataclass
from typing import Protocol

import httpx

MAX_METRICS_BYTES = 8 * 1024 * 1024
"""The most bytes read of one /metrics answer (SMG's is ~100 KB with a handful of workers)."""
TIMEOUT_S = 5.0
_SAMPLE = re.compile(r"^(?P<name>[a-z_]+)\{(?P<labels>[^}]*)\}\s+(?P<value>[0-9.eE+-]+|NaN)\s*$")
_LABEL = re.compile(r'(?P<key>[a-z_]+)="(?P<value>(?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class WorkerFigures:
    """One worker's figures at one moment: requests running, and its answers counted so far."""

    active: int
    successes: int
    failures: int


class RouteControl(Protocol):
    """The gateway as a rollout drives it (the daemon's routes job; None where no gateway is driven)."""

    async def settle(self) -> None:
        """Make the gateway hold the routes the lanes' states derive now; return once it does (bounded)."""

    async def figures(self, url: str) -> WorkerFigures | None:
        """The worker's figures now, or None when the gateway's metrics cannot be read."""


def parse_figures(text: str, url: str) -> WorkerFigures:
    """The figures of worker `url` in a Prometheus text answer; a series the answer lacks counts 0."""
    active = successes = failures = 0.0
    for line in text.splitlines():
        if not line.startswith(("smg_worker_requests_active{", "smg_worker_cb_outcomes_total{")):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        labels = {m["key"]: m["value"] for m in _LABEL.finditer(match["labels"])}
        if labels.get("worker") != url:
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        if math.isnan(value) or value < 0:  # not a count
            continue
        if match["name"] == "smg_worker_requests_active":
            active = value
        elif labels.get("outcome") == "success":
            successes = value
        elif labels.get("outcome") == "failure":
            failures = value
    return WorkerFigures(int(active), int(successes), int(failures))


async def read_figures(metrics_url: str, url: str, client: httpx.AsyncClient | None = None) -> WorkerFigures | None:
    """GET the gateway's /metrics (bounded in bytes and time) and parse `url`'s figures; None if it fails."""
    own = client is None
    http = client or httpx.AsyncClient(timeout=TIMEOUT_S, trust_env=False, follow_redirects=False)
    try:
        # A whole deadline, head and body: httpx's timeout is per read, and a trickling answer would hold a drain.
        async with asyncio.timeout(TIMEOUT_S * 2), http.stream("GET", metrics_url) as answer:
            if answer.status_code != 200:
                return None
            body = bytearray()
            async for chunk in answer.aiter_bytes():
                body.extend(chunk)
                if len(body) > MAX_METRICS_BYTES:
                    return None
        return parse_figures(body.decode("utf-8", "replace"), url)
    except (httpx.HTTPError, TimeoutError):
        return None
    finally:
        if own:
            await http.aclose()
