"""Keep a shutdown from being lost inside HTTP calls.

httpx can turn the cancellation of a task that is connecting into an
`httpx.ConnectError` (encode/httpx#2381). Code that catches transport errors
and goes on (a readiness poll, a retry loop) would then keep running after
SIGTERM asked it to stop: the daemon once waited out a whole readiness
timeout that way and recorded a rollback it was never asked for. The task
still counts the request (`Task.cancelling()`), so such code asks here after
each caught error.
"""

from __future__ import annotations

import asyncio


def cancel_requested() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def raise_if_cancel_requested() -> None:
    """Re-raise a cancellation that a library swallowed; call it where such errors are caught."""
    if cancel_requested():
        raise asyncio.CancelledError
