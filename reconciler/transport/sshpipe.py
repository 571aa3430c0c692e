"""A session's `Pipe` over an SSH channel: its stdin, stdout and end (`transport/session.py`).

The channel's callbacks (an `asyncssh.SSHClientSession`) feed one buffer each for stdout and stderr; no
`SSHClientProcess` and its six stream objects, locks and events: a probe session stays open on every host for
good, and at 1,000 hosts those were about 3 MB of the daemon's memory (issue 27).

Bounds: stdout is buffered up to `BUFFER_MAX_BYTES` and the channel's reading paused past it, so the host
waits (its SSH window closes) until the session reads; stderr keeps its first `STDERR_MAX_BYTES` and drops the
rest. asyncssh's errors never reach the caller: a lost connection is `ConnectionError` (an OSError), so the
session's rules see one kind of failure whatever the transport.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from functools import partial

import asyncssh

from reconciler.transport.session import READ_CHUNK, STDERR_MAX_BYTES

COMMAND_OUTPUT_MAX_BYTES = 64 << 20
"""What one command may print (stdout and stderr together) before its channel is closed and its output refused:
a host is not trusted to bound it, and the largest lanes reads (a model folder's file list, a container's
inspect) is a few megabytes."""

BUFFER_MAX_BYTES = 4 * READ_CHUNK
"""stdout held before the channel's reading pauses: a few reads' worth, so an answer streams without stalls."""


class _Channel(asyncssh.SSHClientSession[bytes]):
    """The callbacks of one session's channel: what arrived, and how it ended."""

    # One per probe session on every host, and per command in flight: slots, not an instance dict each.
    __slots__ = (
        "_waiter",
        "_writable",
        "chan",
        "closed",
        "eof",
        "err",
        "exit_signal",
        "exit_status",
        "lost",
        "out",
        "overflowed",
        "paused",
        "whole",
    )

    def __init__(self, *, whole: bool = False) -> None:
        self.whole = whole
        """A command's channel (`run_command`): its output is kept whole, as a finished command's is read, and
        the channel never paused."""
        self.chan: asyncssh.SSHClientChannel[bytes] | None = None
        self.overflowed = False
        """A command printed more than `COMMAND_OUTPUT_MAX_BYTES`: its channel was closed."""
        self.out = bytearray()
        self.err = bytearray()
        self.eof = False
        self.lost: str | None = None
        """Why the channel went away without its close, if it did (the connection dropped)."""
        self.closed = False
        self.exit_status: int | None = None
        self.exit_signal: str | None = None
        self.paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None

    def connection_made(self, chan: asyncssh.SSHClientChannel[bytes]) -> None:
        self.chan = chan

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if self.whole and len(self.out) + len(self.err) + len(data) > COMMAND_OUTPUT_MAX_BYTES:
            self.overflowed = True  # nothing more kept; the channel's close ends the command
            if self.chan is not None:
                self.chan.close()
            return
        if datatype == asyncssh.EXTENDED_DATA_STDERR:
            room = STDERR_MAX_BYTES - len(self.err)
            if self.whole or room > 0:
                self.err += data if self.whole else data[:room]
            return
        self.out += data
        if self.whole:
            return
        if len(self.out) >= BUFFER_MAX_BYTES and self.chan is not None and not self.paused:
            self.chan.pause_reading()
            self.paused = True
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # nothing more to send either: let the channel close

    def exit_status_received(self, status: int) -> None:
        self.exit_status = status

    def exit_signal_received(self, signal: str, core_dumped: bool, msg: str, lang: str) -> None:
        self.exit_signal = signal

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if exc is not None:
            self.lost = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
        self._wake()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def arrival(self) -> None:
        """Until more output, its end, or the channel's, whichever comes first (callers that wait at once
        share one future: a cancelled one does not cancel the other)."""
        if self._waiter is None or self._waiter.done():
            self._waiter = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._waiter)

    async def writable(self) -> None:
        if self._writable is not None and not self._writable.done():
            await asyncio.shield(self._writable)


@dataclass(frozen=True, slots=True)
class Ended:
    """A command run to its end: its output (decoded, undecodable bytes replaced) and how it ended (neither
    a status nor a signal: the channel closed without saying, as when its connection dropped)."""

    exit_status: int | None
    exit_signal: str | None
    stdout: str
    stderr: str
    overflowed: bool = False
    """It printed more than `COMMAND_OUTPUT_MAX_BYTES`: what it printed was not kept, and it was stopped."""


async def run_command(conn: asyncssh.SSHClientConnection, command: str, input: str | None) -> Ended:
    """Run `command` on `conn` to its end, `input` on its stdin (EOF at once without: a command that reads
    stdin cannot hang on us). asyncssh's errors as they come (the transport tells them apart); a cancel
    closes the channel, so sshd hangs up on the command instead of leaving it to run unwatched.

    The channel's own callbacks collect the output, with no `SSHClientProcess`: a finished command's process,
    its six stream objects and their locks formed reference cycles, freed only by a full garbage collection,
    which a daemon holding 1,000 connections seldom runs (issue 27: about 3 MB held after a first
    convergence, and more at its peak)."""
    _, channel = await conn.create_session(partial(_Channel, whole=True), command, encoding=None)
    assert isinstance(channel, _Channel)  # what the factory made; asyncssh types it as its base class
    chan = channel.chan
    assert chan is not None
    try:
        # A command that ended before it read its stdin refuses what is left to send: its end says the rest.
        with contextlib.suppress(BrokenPipeError):
            if input:
                chan.write(input.encode("utf-8"))
            chan.write_eof()
        while not channel.closed:
            await channel.arrival()
    except asyncio.CancelledError:
        chan.close()
        raise
    if channel.overflowed:
        return Ended(channel.exit_status, channel.exit_signal, "", "", overflowed=True)
    return Ended(
        channel.exit_status,
        channel.exit_signal,
        channel.out.decode("utf-8", errors="replace"),
        channel.err.decode("utf-8", errors="replace"),
    )


class SSHPipe:
    """stdin, stdout and the end of one command on a pooled connection (bytes: the channel has no encoding)."""

    def __init__(self, channel: _Channel, conn: asyncssh.SSHClientConnection) -> None:
        self.channel = channel
        self.conn = conn

    @staticmethod
    async def open(conn: asyncssh.SSHClientConnection, command: str) -> SSHPipe:
        """Start `command` on `conn` (asyncssh's errors as they come: the transport tells them apart)."""
        _, channel = await conn.create_session(_Channel, command, encoding=None)
        assert isinstance(channel, _Channel)  # what the factory made; asyncssh types it as its base class
        return SSHPipe(channel, conn)

    def write(self, data: bytes) -> None:
        chan = self.channel.chan
        if chan is None or self.channel.closed or chan.is_closing():
            raise ConnectionError("the channel is closed")
        chan.write(data)

    async def drain(self) -> None:
        await self.channel.writable()
        if self.channel.lost is not None:
            raise ConnectionError(self.channel.lost)

    async def read(self, n: int) -> bytes:
        channel = self.channel
        while not channel.out:
            if channel.lost is not None:
                raise ConnectionError(channel.lost)
            if channel.eof or channel.closed:
                return b""
            await channel.arrival()
        data = bytes(channel.out[:n])
        del channel.out[:n]
        if channel.paused and len(channel.out) < BUFFER_MAX_BYTES and channel.chan is not None:
            channel.paused = False
            channel.chan.resume_reading()
        return data

    async def finish(self, stderr_limit: int) -> tuple[int | None, bool, bytes]:
        # The channel closes once sshd sent the exit status and its own close; both follow the end of stdout
        # at once (or the connection's loss does). The caller's request timeout bounds this wait.
        channel = self.channel
        while not channel.closed:
            await channel.arrival()
        signal, status = channel.exit_signal, channel.exit_status
        reported = signal is not None or status is not None
        return (None if signal is not None else status), reported, bytes(channel.err[:stderr_limit])

    def alive(self) -> bool:
        chan = self.channel.chan
        if self.conn.is_closed() or chan is None or chan.is_closing() or self.channel.closed:
            return False
        return not self.channel.eof

    async def close(self) -> None:
        # Closing the channel makes sshd hang up on the command (its stdin ends: the program exits). Not waited
        # for: a host that went away would hold the caller until its connection timed out.
        if self.channel.chan is not None:
            self.channel.chan.close()
