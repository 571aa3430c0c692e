"""A rollout's own steps in a lane transaction: drain a lane out of its route, and watch a blue/green change.

Both begin by recording the lane's phase (DRAINING, WATCHING), from which the gateway's routes derive, and
having the gateway hold them (`RouteControl.settle`); then they read the gateway's figures for one worker:

- a drain waits until the worker has no request running, up to its bound (a bound passed is said, and the
  ranks stop anyway: a request cannot hold a change for ever);
- a watch keeps the new head routed for its window and fails (untouched: the old ranks still run) when its
  engine stops answering or more than the allowed share of its answers failed, once enough were seen.

Without a gateway to drive (`lanes apply`, or `[gateway]` off) a drain has nothing to wait for and a watch
checks the engine's health once: no traffic reaches the new ranks through lanes, so there is no window.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import httpx

from reconciler.errors import NotReadyError, StepFailedError
from reconciler.execute import prepromotion
from reconciler.execute.assess import assessment_client, engine_answers
from reconciler.execute.hostops import HostOps
from reconciler.execute.results import ProgressEvent, ProgressFn
from reconciler.gateway.control import RouteControl, WorkerFigures
from reconciler.gateway.routes import worker_url
from reconciler.plan.steps import Drain, Watch
from reconciler.spec.lane import Health

LOOK_S = 1.0
BLIND_DRAIN_S = 5.0
"""A drain that cannot read the gateway's figures waits this long: SMG's own drain settle time (5 s)."""
"""How often a drain or a watch reads the gateway's figures and the engine's health."""


def _url(ops: HostOps, host: str, port: int) -> str:
    return worker_url(ops.targets[host].address, port)


async def drain(
    ops: HostOps, step: Drain, routes: RouteControl | None, lane: str, progress: ProgressFn, look_s: float = LOOK_S
) -> None:
    """Out of the route, then wait (bounded) for the worker's requests in flight to end."""
    if routes is None:
        return
    await routes.settle()
    url = _url(ops, step.host, step.port)
    deadline = time.monotonic() + step.timeout_s
    while True:
        figures = await routes.figures(url)
        if figures is not None and figures.active == 0:
            return
        if figures is None and time.monotonic() >= deadline - step.timeout_s + BLIND_DRAIN_S:
            # The gateway's metrics cannot be read: requests in flight get what SMG's own drain gives a worker.
            said = f"the gateway's metrics could not be read; stopping after {BLIND_DRAIN_S:g} s"
            progress(ProgressEvent(lane, step.kind, "info", said))
            return
        if time.monotonic() >= deadline:
            running = "unknown (the gateway's metrics could not be read)" if figures is None else str(figures.active)
            said = f"{running} requests still running after {step.timeout_s:g} s; its ranks stop now"
            progress(ProgressEvent(lane, step.kind, "info", said))
            return
        await asyncio.sleep(look_s)


async def watch(
    ops: HostOps,
    step: Watch,
    health: Health,
    routes: RouteControl | None,
    lane: str,
    progress: ProgressFn,
    look_s: float = LOOK_S,
    clock: Callable[[], float] = time.monotonic,
) -> WorkerFigures | None:
    """The new head takes the traffic for the window; StepFailedError (untouched) when it fails the window.

    Returns the window's own figures (answers and failures counted in it), None without a gateway's figures."""
    if routes is not None:
        await routes.settle()
    url = _url(ops, step.host, step.port)
    address = ops.targets[step.host].address
    start = await routes.figures(url) if routes is not None else None
    # No gateway driven: no traffic reaches the new ranks through lanes, so there is no window to watch, only
    # the engine's health once (clients that reach lanes directly move to the new address themselves).
    deadline = clock() + (step.window_s if routes is not None else 0.0)
    seen: WorkerFigures | None = None
    async with assessment_client(5.0) as client:
        while True:
            answer = await engine_answers(client, address, step.port, health)
            if answer is not None:
                raise _failed(f"in the watch window, {answer}")
            if step.max_ttft_s is not None:
                ttft = await first_token_s(client, address, step.port, step.served_model, step.max_ttft_s * 4)
                if ttft is None or ttft > step.max_ttft_s:
                    took = "no token" if ttft is None else f"a first token after {ttft:.2f} s"
                    raise _failed(f"in the watch window, {took} (at most {step.max_ttft_s:g} s allowed)")
            if routes is not None and start is not None:
                start = await _rebased(routes, url, start)
            seen = await _window(routes, url, start, step) or seen
            if clock() >= deadline:
                break
            await asyncio.sleep(min(look_s, max(deadline - clock(), 0.0)))
    if seen is not None:
        said = f"{seen.successes + seen.failures} requests in the window, {seen.failures} failed"
        progress(ProgressEvent(lane, step.kind, "info", said))
    return seen


async def _rebased(routes: RouteControl, url: str, start: WorkerFigures) -> WorkerFigures:
    """The window's starting figures, taken again when the gateway's counters went back (it restarted)."""
    now = await routes.figures(url)
    if now is not None and (now.successes < start.successes or now.failures < start.failures):
        return WorkerFigures(0, 0, 0)  # a restarted gateway counts from zero: the window counts from there
    return start


async def _window(
    routes: RouteControl | None, url: str, start: WorkerFigures | None, step: Watch
) -> WorkerFigures | None:
    """The figures counted since the window began; raises when their error rate fails the window."""
    if routes is None or start is None:
        return None
    now = await routes.figures(url)
    if now is None:
        return None
    seen = WorkerFigures(now.active, now.successes - start.successes, now.failures - start.failures)
    total = seen.successes + seen.failures
    if total >= max(step.min_requests, 1) and seen.failures / total > step.max_error_rate:
        raise _failed(
            f"{seen.failures} of {total} requests to the new spec failed in the watch window "
            f"({seen.failures / total:.1%}, over the {step.max_error_rate:.1%} allowed)"
        )
    return seen


async def first_token_s(
    client: httpx.AsyncClient, address: str, port: int, model: str, timeout_s: float
) -> float | None:
    """Seconds to the first token of one short streamed completion sent to the engine itself; None: none came."""
    body = {"model": model, "prompt": "Say hello", "max_tokens": 2, "stream": True}
    sent = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", f"http://{address}:{port}/v1/completions", json=body) as answer:
                if answer.status_code != 200:
                    return None
                async for line in answer.aiter_lines():
                    if not line.startswith("data:") or line.strip() == "data: [DONE]":
                        continue
                    try:
                        chunk = json.loads(line[5:])
                    except ValueError:
                        return None
                    choices = chunk.get("choices") if isinstance(chunk, dict) else None
                    if isinstance(choices, list) and any(isinstance(c, dict) and c.get("text") for c in choices):
                        return time.monotonic() - sent  # a token, not an empty first chunk
    except (TimeoutError, httpx.HTTPError, OSError):
        return None
    return None


async def pre_promotion(ops: HostOps, step: Watch) -> prepromotion.Verdict:
    """The side-by-side benchmark of the old head and the new one (reconciler.execute.prepromotion)."""
    old = f"http://{ops.targets[step.old_host].address}:{step.old_port}/v1"
    new = f"http://{ops.targets[step.host].address}:{step.port}/v1"
    return await prepromotion.compare(old, new, step.served_model, step.max_slowdown or 0.0)


def _failed(why: str) -> StepFailedError:
    # Untouched: the old ranks still run and take the traffic back; the new spec is what failed.
    return StepFailedError.wrap("watch", [NotReadyError(why)], touched=False)
