"""The staged readiness gate: a lane is healthy only when it serves a token.

Engines bind their port long before the model is loaded (tens of minutes for
a big model on a Spark), and `/health` can answer before the served model is
listed, so each stage has its own timeout and its own time is recorded:
port listening, `/health` 200, `/v1/models` lists the model, one streamed
completion returns a token.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import ssl
import time
from dataclasses import dataclass, field

import httpx

from reconciler.cancel import raise_if_cancel_requested
from reconciler.spec.lane import Health


@dataclass
class GateResult:
    ok: bool
    stage: str
    error: str | None = None
    timings: dict[str, float] = field(default_factory=dict)


async def _port_open(address: str, port: int, timeout: float) -> bool:
    try:
        # asyncio.timeout, not wait_for: on 3.11 wait_for drops a cancel that lands as the connect
        # completes, and the gate would then poll on after SIGTERM.
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(address, port)
    except (TimeoutError, OSError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One TLS context for every client that talks to engines.

    Engines answer plain HTTP (every URL lanes builds for them is http://), but each new httpx client would
    otherwise load the CA bundle into a context of its own (~0.85 MB, ~85 ms of CPU): with 250 lanes
    converging at once that alone was 145 MB of the daemon's peak. This one loads no CA at all (the bundle is
    1.7 MB of RSS, issue 27): were an https URL ever built, its certificate could not be verified and the
    request would fail, never go unverified (certificates required, host names checked).
    """
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


async def wait_ready(
    address: str,
    port: int,
    served_model: str,
    health: Health,
    *,
    started: float | None = None,
    died: asyncio.Event | None = None,
) -> GateResult:
    """Walk the stages; the caller sets `died` when a rank exited, to fail fast."""
    t0 = started if started is not None else time.monotonic()
    timings: dict[str, float] = {}
    base = f"http://{address}:{port}"
    poll = health.poll_interval_s

    async def until(stage: str, timeout: float, probe: object) -> GateResult | None:
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while True:
            if died is not None and died.is_set():
                return GateResult(False, stage, f"a rank exited while waiting for {stage}", timings)
            try:
                result = await probe()  # type: ignore[operator]
            except (httpx.HTTPError, OSError, ValueError) as exc:
                raise_if_cancel_requested()
                result, last = False, f"{type(exc).__name__}: {exc}"
            if result is True:
                timings[stage] = round(time.monotonic() - t0, 3)
                return None
            if isinstance(result, str):
                last = result
            if time.monotonic() >= deadline:
                return GateResult(False, stage, f"{stage} not reached within {timeout:.0f} s ({last})", timings)
            raise_if_cancel_requested()  # a probe may have answered as if a shutdown's cancel never came
            await asyncio.sleep(poll)

    http_timeout = httpx.Timeout(10.0, read=max(30.0, health.completion_timeout_s))
    async with httpx.AsyncClient(timeout=http_timeout, verify=tls_context()) as client:

        async def port_probe() -> bool | str:
            return True if await _port_open(address, port, 2.0) else f"port {port} closed"

        async def health_probe() -> bool | str:
            r = await client.get(base + health.path)
            return True if r.status_code == 200 else f"{health.path} answered {r.status_code}"

        async def models_probe() -> bool | str:
            r = await client.get(base + "/v1/models")
            if r.status_code != 200:
                return f"/v1/models answered {r.status_code}"
            ids = [m.get("id") for m in r.json().get("data", [])]
            return True if served_model in ids else f"/v1/models lists {ids}, not '{served_model}'"

        async def token_probe() -> bool | str:
            body = {
                "model": served_model,
                "prompt": "Say hello",
                "max_tokens": 4,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            sent = time.monotonic()
            async with client.stream("POST", base + "/v1/completions", json=body) as r:
                if r.status_code != 200:
                    return f"/v1/completions answered {r.status_code}"
                async for line in r.aiter_lines():
                    if not line.startswith("data:") or line.strip() == "data: [DONE]":
                        continue
                    chunk = json.loads(line[5:])
                    if any(choice.get("text") for choice in chunk.get("choices", [])):
                        timings["startup_ttft"] = round(time.monotonic() - sent, 3)
                        return True
            return "the stream ended without a token"

        for stage, timeout, probe in (
            ("port", health.port_timeout_s, port_probe),
            ("health", health.ready_timeout_s, health_probe),
            ("models", health.models_timeout_s, models_probe),
            ("token", health.completion_timeout_s, token_probe),
        ):
            failed = await until(stage, timeout, probe)
            if failed is not None:
                return failed
    return GateResult(True, "ready", None, timings)
