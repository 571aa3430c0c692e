"""The dispatcher: a queue and a worker per receiver, so no receiver ever holds up a cycle.

`publish` only puts the event on queues (never waits, never raises). Each
receiver's worker takes its messages in order, waits for its rate limit (a
token bucket), and sends in a thread of its own with a timeout,
retrying with doubling backoff; a message that still fails is logged and
given up. A full queue drops its oldest message (logged), so a receiver that
is down for hours costs a bounded amount of memory. A repeat (same kind,
lane or host, commit) within the dedup window is not sent again.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from reconciler.notifications.events import Event
from reconciler.notifications.receivers import ReceiverError, send
from reconciler.notifications.settings import NotificationSettings, ReceiverSettings

log = structlog.get_logger("lanes.notifications")
BURST = 5
"""Messages a receiver may get at once before its rate applies."""
SEEN_MAX = 10_000
"""Event keys remembered at most (oldest forgotten first), whatever the window."""

SendFn = Callable[[ReceiverSettings, str, str, str, float], None]
TallyFn = Callable[[str, str], None]
"""(receiver, outcome) -> None, outcome one of sent, failed, dropped: the daemon counts them in /metrics."""


def no_tally(receiver: str, outcome: str) -> None:
    return None


async def in_thread(fn: Callable[..., None], *args: Any) -> None:
    """`fn(*args)` in a thread of its own, awaited; a daemon thread, so a send that hangs never delays the exit.

    Not the loop's default executor (the daemon's fetches and git notes use it) nor a pool: a pool's
    threads are joined at interpreter exit, so one receiver hanging would hold up the daemon's stop.
    Each receiver sends one message at a time, so a hanging receiver holds one thread, its own.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if done.done():  # the awaiting task was cancelled (the daemon stops)
            return
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)

    def run() -> None:
        error: BaseException | None = None
        try:
            fn(*args)
        except BaseException as exc:  # handed to the awaiting task, which logs it and goes on
            error = exc if isinstance(exc, Exception) else ReceiverError(type(exc).__name__)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, error)

    threading.Thread(target=run, name="lanes-notification", daemon=True).start()
    await done


class Bucket:
    """A token bucket: `rate` tokens a second, `burst` at most."""

    def __init__(self, per_minute: float, burst: int = BURST, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self.tokens = float(burst)
        self.clock = clock
        self.at = clock()

    def reserve(self) -> float:
        """Take the next token (the bucket may go into debt): the seconds to wait before using it."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate) - 1.0
        self.at = now
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate


@dataclass
class _Receiver:
    name: str
    settings: ReceiverSettings
    queue: asyncio.Queue[Event]
    bucket: Bucket
    task: asyncio.Task[None] | None = None
    sending: bool = False
    """A message is being worked on (waiting for its rate, being sent, or between tries)."""


class Dispatcher:
    def __init__(self, settings: NotificationSettings, *, sender: SendFn = send, tally: TallyFn = no_tally) -> None:
        self.settings = settings
        self.sender = sender
        self.tally = tally
        self.seen: OrderedDict[tuple[str, str, str], float] = OrderedDict()
        self.receivers = {
            name: _Receiver(name, r, asyncio.Queue(settings.queue_size), Bucket(r.rate_per_minute))
            for name, r in settings.receivers.items()
        }
        self.sent = 0
        self.failed = 0
        self.dropped = 0

    def start(self) -> None:
        for r in self.receivers.values():
            r.task = asyncio.create_task(self._work(r), name=f"notifications-{r.name}")

    def publish(self, events: Iterable[Event]) -> None:
        """Queue events for their receivers; never blocks, never raises."""
        for event in events:
            if self._repeat(event):
                log.debug("notification.repeat", kind=event.kind, key=list(event.key))
                continue
            labels = {k: set(v) for k, v in event.labels.items()}
            for r in self.receivers.values():
                if not r.settings.wants(event.kind, event.lanes, labels):
                    continue
                if r.queue.full():
                    old = r.queue.get_nowait()
                    r.queue.task_done()  # it will never be worked on: `close` must not wait for it
                    self.dropped += 1
                    self.tally(r.name, "dropped")
                    log.warning("notification.dropped", receiver=r.name, kind=old.kind, reason="queue full")
                r.queue.put_nowait(event)

    def _repeat(self, event: Event) -> bool:
        now = time.monotonic()
        window = self.settings.dedup_window_s
        while self.seen and (len(self.seen) > SEEN_MAX or next(iter(self.seen.values())) < now - window):
            self.seen.popitem(last=False)
        if event.key in self.seen:
            return True
        self.seen[event.key] = now
        return False

    async def _work(self, r: _Receiver) -> None:
        while True:
            event = await r.queue.get()
            r.sending = True
            try:
                wait = r.bucket.reserve()
                if wait > 0:
                    await asyncio.sleep(wait)
                await self._deliver(r, event)
            finally:
                r.sending = False
                r.queue.task_done()

    async def _deliver(self, r: _Receiver, event: Event) -> None:
        s = self.settings
        for attempt in range(1, s.attempts + 1):
            try:
                await in_thread(self.sender, r.settings, event.title, event.body(), event.severity, s.timeout_s)
            except ReceiverError as exc:
                error = str(exc)
            except Exception as exc:  # a receiver's failure, however odd, never reaches the daemon
                error = f"{type(exc).__name__}: {exc}"
            else:
                self.sent += 1
                self.tally(r.name, "sent")
                log.info("notification.sent", receiver=r.name, kind=event.kind, attempt=attempt)
                return
            if attempt < s.attempts:
                delay = min(s.backoff_max_s, s.backoff_s * 2 ** (attempt - 1))
                log.info("notification.retry", receiver=r.name, kind=event.kind, error=error, retry_in_s=delay)
                await asyncio.sleep(delay)
            else:
                self.failed += 1
                self.tally(r.name, "failed")
                log.warning("notification.failed", receiver=r.name, kind=event.kind, error=error, attempts=s.attempts)

    def queued(self) -> dict[str, int]:
        """Messages waiting per receiver (a receiver that is down or rate-limited shows here first)."""
        return {name: r.queue.qsize() for name, r in self.receivers.items()}

    async def close(self, grace_s: float = 2.0) -> None:
        """Give queued messages `grace_s` to go out, then stop; a send in flight ends with its own timeout."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace_s):
                await asyncio.gather(*(r.queue.join() for r in self.receivers.values()))
        for r in self.receivers.values():
            if r.sending or not r.queue.empty():  # given up, not waited for: said, so a lost message is known
                log.warning("notification.abandoned", receiver=r.name, in_flight=r.sending, queued=r.queue.qsize())
            if r.task is not None:
                r.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await r.task
