"""Health observed at every resync: a serving lane's engine is asked, not assumed.

A lane whose ranks all run the spec that once passed its gate is noop for the
planner, and a lane held back (its new spec failed and was rolled back, a
backoff, a lease, a change window) serves what last passed its gate; but a
running container is not a serving engine (it can hang, lose its GPU, or
answer 503 after a fault). At each cycle the head is asked its health path
once: one HTTP round trip per running lane, with a short timeout. Every
rank's container state comes from the cycle's probe already (a rank that
exited is drift: the lane is redeployed, or, held back, its healthy spec put
back as it was).
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from types import TracebackType

import httpx

from reconciler.cancel import raise_if_cancel_requested
from reconciler.execute.readiness import tls_context
from reconciler.spec.lane import Health

if importlib.util.find_spec("sniffio") is None:
    # httpcore 1.0.9 (_synchronization.current_async_library) tries `import sniffio` at every request, and
    # a failed import is not remembered: each one searched sys.path again, about 750 times per no-op resync
    # of 250 lanes. None in sys.modules makes that same import fail at once ("import of sniffio halted;
    # None in sys.modules", the import system's documented behaviour), so httpcore takes the asyncio path it
    # takes now. Only when sniffio is not installed: an installed one is imported as before.
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]

ASSESS_CONCURRENCY = 32
"""Health requests of one cycle in flight at once. Unbounded, 250 lanes' requests all waited in one httpx
pool, whose every assignment scans each queued request against each connection: at 250 lanes that was 2.3
million checks, most of a no-op resync's CPU (bench/README.md, issue 27). 32 at once answer 250 loopback
engines in a few tens of ms; an engine that hangs holds one slot for the timeout, not the cycle."""


class Assessment:
    """One cycle's health requests: one client (a TLS context and a pool, not one each), `slots` at once.

    No connection is kept alive: each lane's head is another origin, so a kept connection is never reused
    within a cycle, and the client ends with the cycle."""

    def __init__(self, timeout_s: float, slots: int = ASSESS_CONCURRENCY) -> None:
        limits = httpx.Limits(max_connections=slots, max_keepalive_connections=0)
        self.client = httpx.AsyncClient(timeout=timeout_s, verify=tls_context(), limits=limits)
        self.slots = asyncio.Semaphore(slots)

    async def __aenter__(self) -> Assessment:
        await self.client.__aenter__()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.client.__aexit__(kind, exc, tb)


def assessment_client(timeout_s: float) -> Assessment:
    """What a cycle's lanes ask their engines' health with (`engine_answers`)."""
    return Assessment(timeout_s)


async def engine_answers(assessment: Assessment, address: str, port: int, health: Health) -> str | None:
    """None when the head's health path answers 200; otherwise what it answered, for a person."""
    url = f"http://{address}:{port}{health.path}"
    try:
        async with assessment.slots:
            response = await assessment.client.get(url)
    except (httpx.HTTPError, OSError) as exc:
        raise_if_cancel_requested()
        return f"{address}:{port}{health.path} did not answer ({type(exc).__name__}: {exc or 'no reason given'})"
    if response.status_code != 200:
        return f"{address}:{port}{health.path} answered {response.status_code}"
    return None
