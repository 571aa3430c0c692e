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

import httpx

from reconciler.cancel import raise_if_cancel_requested
from reconciler.execute.readiness import tls_context
from reconciler.spec.lane import Health


def assessment_client(timeout_s: float) -> httpx.AsyncClient:
    """One client for every lane's check of a cycle (a client each would cost a TLS context and a pool)."""
    return httpx.AsyncClient(timeout=timeout_s, verify=tls_context())


async def engine_answers(client: httpx.AsyncClient, address: str, port: int, health: Health) -> str | None:
    """None when the head's health path answers 200; otherwise what it answered, for a person."""
    url = f"http://{address}:{port}{health.path}"
    try:
        response = await client.get(url)
    except (httpx.HTTPError, OSError) as exc:
        raise_if_cancel_requested()
        return f"{address}:{port}{health.path} did not answer ({type(exc).__name__}: {exc or 'no reason given'})"
    if response.status_code != 200:
        return f"{address}:{port}{health.path} answered {response.status_code}"
    return None
