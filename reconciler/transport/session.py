"""A long-lived command on a host that answers one request line with one answer line (`Transport.session`).

The probe keeps one such command per host (the probe program's `serve` mode, `facts/probe_serve.py`) so a
probe is a data packet each way instead of a channel opened, a command run and the channel closed. The rules
are the transport's, shared here by every implementation (SSH, local; each supplies a `Pipe`):

- one request in flight per session (a lock): a commit's reaction and a full cycle may probe one host at once;
- every request is bounded: its timeout (the caller's, the cycle's probe timeout) and the answer's size;
- anything unexpected (a timeout, an answer over the bound, end of output, a dropped connection, a cancel)
  closes the session and raises `HostUnreachableError` with the reason: after a request was sent, the stream's
  state is unknown, so the session is never used again and nothing is retried. The next caller gets a fresh
  session from its transport;
- a command that ended on its own keeps what it said (`ended`: exit status and the start of its stderr), so a
  caller can tell "the program is not installed" from a host that went away.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Protocol

from reconciler.errors import HostUnreachableError
from reconciler.transport.base import CommandResult, HostTarget

READ_CHUNK = 1 << 16
"""Bytes asked of the pipe per read: an SSH packet carries at most 32 KB, so one read takes what arrived."""
STDERR_MAX_BYTES = 1 << 16
"""What is kept of an ended command's stderr: enough for any message of the launcher or the program (one
line), while a host that writes megabytes there costs no more than this."""


class Pipe(Protocol):
    """A running command's stdin, stdout and end, as one transport reaches them (bytes, no encoding)."""

    def write(self, data: bytes) -> None:
        """Queue `data` for stdin; OSError when it can no longer be sent."""

    async def drain(self) -> None:
        """Wait until stdin takes what was written; OSError when the command or its connection went away."""

    async def read(self, n: int) -> bytes:
        """Up to `n` bytes of stdout as they arrive; b"" at its end; OSError when the connection dropped."""

    async def finish(self, stderr_limit: int) -> tuple[int | None, bool, bytes]:
        """After stdout ended: (exit status or None, whether an end was reported at all, the first
        `stderr_limit` bytes of stderr). A command killed by a signal has no status but was reported."""

    def alive(self) -> bool:
        """False once the command ended or its channel or connection closed."""

    async def close(self) -> None:
        """Stop the command (close its channel, or kill it): never waits on a host that may be gone."""


class LineSession:
    """One command answering request lines; see the module docstring for its rules."""

    # One per host for good (the probe's): slots, not an instance dict each.
    __slots__ = (
        "_closed",
        "_last_used",
        "_lock",
        "_on_close",
        "_slots",
        "answered",
        "argv",
        "ended",
        "host",
        "pipe",
    )

    def __init__(
        self,
        host: HostTarget,
        argv: tuple[str, ...],
        pipe: Pipe,
        on_close: Callable[[LineSession], None] | None = None,
        slots: asyncio.Semaphore | None = None,
    ) -> None:
        self.host = host
        self._slots = slots
        """The transport's bound on commands in flight: a request holds one while it waits for its answer."""
        self.argv = argv
        self.pipe = pipe
        self._on_close = on_close
        self._lock = asyncio.Lock()
        self._closed = False
        self._last_used = time.monotonic()
        self.answered = 0
        """Requests answered: 0 for a session that never answered (the launcher may have refused to start)."""
        self.ended: CommandResult | None = None
        """The command's own end (exit status, stderr) when it ended by itself, before or between answers."""

    @property
    def closed(self) -> bool:
        return self._closed or not self.pipe.alive()

    @property
    def idle_s(self) -> float:
        """Seconds since the session opened or last answered."""
        return time.monotonic() - self._last_used

    async def request(self, line: str, *, timeout: float, limit: int) -> str:
        """Send `line` (one line, ending in a newline) and return the answer line without its newline.

        The timeout starts once this request holds the session (and a slot of its transport), as a command's
        starts once it holds a slot: waiting behind another request is not this host being slow."""
        if not line.endswith("\n") or "\n" in line[:-1]:
            raise ValueError("a request is exactly one line ending in a newline")
        data = line.encode("utf-8")
        async with self._lock:
            if self._closed:
                # Closed by the request before ours (its failure): nothing of ours was sent, and a fresh session
                # is the caller's to ask for.
                raise HostUnreachableError(self.host.name, f"the session of {self.argv[0]} closed before the request")
            try:
                async with self._slots or contextlib.nullcontext(), asyncio.timeout(timeout):
                    answer = await self._exchange(data, limit)
            except TimeoutError:
                await self.close()
                raise HostUnreachableError(
                    self.host.name, f"timed out after {timeout:g}s waiting for {self.argv[0]}'s answer"
                ) from None
            except BaseException:  # cancelled, or no answer (HostUnreachableError): never used again
                await self.close()
                raise
            self.answered += 1
            self._last_used = time.monotonic()
            return answer

    async def _exchange(self, data: bytes, limit: int) -> str:
        try:
            if not self.pipe.alive():
                # It ended on its own before this request (a launcher that refused at once, a host that hung up):
                # nothing is sent, and what it said is kept.
                raise await self._ended(None)
            self.pipe.write(data)
            await self.pipe.drain()
            return await self._answer(limit)
        except OSError as exc:
            # The write or the read failed: a command that ended on its own (its end reported) says why; else
            # the connection went.
            raise await self._ended(str(exc)) from None

    async def _answer(self, limit: int) -> str:
        buf = bytearray()
        while True:
            chunk = await self.pipe.read(READ_CHUNK)
            if not chunk:
                raise await self._ended(None)
            at = chunk.find(b"\n")
            if at < 0:
                buf += chunk
                if len(buf) > limit:
                    raise HostUnreachableError(self.host.name, f"{self.argv[0]} answered more than {limit} bytes")
                continue
            if at != len(chunk) - 1:
                # One request, one line: more is a host that does not follow the protocol (or lies about it).
                raise HostUnreachableError(self.host.name, f"{self.argv[0]} answered more than one line")
            buf += chunk[:at]
            if len(buf) > limit:
                raise HostUnreachableError(self.host.name, f"{self.argv[0]} answered more than {limit} bytes")
            return buf.decode("utf-8", errors="replace")

    async def _ended(self, lost: str | None) -> HostUnreachableError:
        """Why the command gave no answer: its own end (kept in `ended`), or its connection's loss."""
        status, reported, stderr = await self.pipe.finish(STDERR_MAX_BYTES)
        text = stderr.decode("utf-8", errors="replace")
        if not reported:
            # sshd reports every command's end; a channel closed without one lost its connection.
            why = f": {lost}" if lost else ""
            return HostUnreachableError(self.host.name, f"connection lost waiting for {self.argv[0]}{why}")
        self.ended = CommandResult(self.host.name, self.argv, status, "", text, 0.0)
        said = text.strip().splitlines()[-1:] or ["(no stderr)"]
        shown = "killed by a signal" if status is None else f"exit {status}"
        return HostUnreachableError(self.host.name, f"{self.argv[0]} ended without answering ({shown}): {said[0]}")

    async def close(self) -> None:
        """End the command and forget it (idempotent, never waits on the host: it may be gone)."""
        if self._closed:
            return
        self._closed = True
        await self.pipe.close()
        if self._on_close is not None:
            self._on_close(self)
