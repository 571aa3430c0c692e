"""Waiting in a test for something another task or process does, with a timeout that says what was awaited."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def wait_for(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> float:
    """Poll `predicate` every `interval` s until it holds; the seconds it took. AssertionError after `timeout`."""
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)
    return time.monotonic() - t0
