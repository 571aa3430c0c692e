"""A session's `Pipe` over an asyncssh process: its channel's stdin, stdout and end (`transport/session.py`).

asyncssh raises its own errors (`asyncssh.Error`: a lost connection, a disconnect) from reads and drains;
they are turned into `ConnectionError` (an OSError) here, so the session's rules see one kind of failure
whatever the transport.
"""

from __future__ import annotations

import asyncssh


class SSHPipe:
    """stdin, stdout and the end of one command on a pooled connection (bytes: the channel has no encoding)."""

    def __init__(self, process: asyncssh.SSHClientProcess[bytes], conn: asyncssh.SSHClientConnection) -> None:
        self.process = process
        self.conn = conn

    def write(self, data: bytes) -> None:
        self.process.stdin.write(data)  # OSError when the channel is no longer open for sending

    async def drain(self) -> None:
        try:
            await self.process.stdin.drain()
        except asyncssh.Error as exc:
            raise ConnectionError(exc.reason) from None

    async def read(self, n: int) -> bytes:
        try:
            return await self.process.stdout.read(n)
        except asyncssh.Error as exc:
            raise ConnectionError(exc.reason) from None

    async def finish(self, stderr_limit: int) -> tuple[int | None, bool, bytes]:
        # The channel closes once sshd sent the exit status and its own close; both follow the end of stdout
        # at once (or the connection's loss does). The caller's request timeout bounds this wait.
        await self.process.wait_closed()
        err = bytearray()
        while len(err) < stderr_limit:
            try:
                chunk = await self.process.stderr.read(stderr_limit - len(err))
            except asyncssh.Error:
                break
            if not chunk:
                break
            err += chunk
        signal = self.process.exit_signal
        status = self.process.exit_status
        reported = signal is not None or status is not None
        # asyncssh leaves exit_status at -1 after a signal; lanes reports "no status" then, as `run` does.
        return (None if signal is not None else status), reported, bytes(err)

    def alive(self) -> bool:
        if self.conn.is_closed() or self.process.is_closing():
            return False
        return not self.process.stdout.at_eof()

    async def close(self) -> None:
        # Closing the channel makes sshd hang up on the command (its stdin ends: the program exits). Not waited
        # for: a host that went away would hold the caller until its connection timed out.
        self.process.close()
