"""A level trigger: many kicks, one wake-up.

Watches, fetches, webhooks and timers all say "look again"; the daemon then
reconciles once toward the newest commit, however many kicks arrived while it
was busy. That is what makes a burst of ten pushes cost one reconcile.
"""

from __future__ import annotations

import asyncio
import contextlib

LANE_KICK = "lane:"
"""A kick for one lane (`lane:<name>`, `lanes reconcile --lane`): a cycle that plans and acts for it alone."""


class Trigger:
    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._reasons: set[str] = set()

    def kick(self, reason: str) -> None:
        self._reasons.add(reason)
        self._event.set()

    async def wait(self, timeout: float | None) -> set[str]:
        """The reasons gathered since the last wait; empty after `timeout` seconds of quiet."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._event.wait()
        self._event.clear()
        reasons, self._reasons = self._reasons, set()
        return reasons
