"""The daemon's health round: in-sync lanes' engines asked at a cadence of their own (`[daemon]
health_interval_s`), beside the cycles, never in them (`reconciler.execute.health`).

An interval job kicks the trigger ("health"), and the main loop starts the round as a background job of its
own (one at a time: a kick while one runs is dropped), so neither a commit nor an operator waits for it. What
it learns goes through the one writer of lane state; a lane whose health it changed may change who serves,
so the gateway is told.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from reconciler.daemon.decider import log_progress
from reconciler.execute.cycle import CycleRunner
from reconciler.execute.operations import Operations
from reconciler.execute.results import ExecutorConfig

log = structlog.get_logger("lanes.daemon")

ROUND_TIMEOUT_S = 120.0
"""A round's deadline: each request has its own (`ExecutorConfig.assess_timeout_s`, 32 at once), so 250
engines that all hang take about 40 s; a round that is still running after this is cut, and the next asks."""


async def health_round(runner: CycleRunner, operations: Operations, changed: Callable[[], None]) -> None:
    try:
        async with asyncio.timeout(ROUND_TIMEOUT_S):
            n = await runner.health.round(runner.store, ExecutorConfig.assess_timeout_s, log_progress, operations.busy)
    except TimeoutError:
        log.error("health.round_timeout", timeout_s=ROUND_TIMEOUT_S)
        return
    except Exception as exc:  # a broken round costs that round; the next one, and every cycle, still look
        log.error("health.round_crashed", error=f"{type(exc).__name__}: {exc}", exc_info=True)
        return
    if n:
        changed()
