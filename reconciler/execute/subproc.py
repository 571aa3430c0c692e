"""Run one local program (rsync, ssh, ssh-agent) with a deadline, its stdout streamed, killed with its children.

Each program starts in a session of its own (its own process group), so a timeout or a cancellation
(the daemon stopping, a lane's transaction abandoned) kills the program and what it started: rsync's
ssh, ssh's ProxyCommand. The group gets SIGTERM, then SIGKILL after a grace period. stderr is kept (its
last 64 KiB) for the error message.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

STDERR_KEEP = 64 << 10
KILL_GRACE_S = 3.0


class SubprocessTimeoutError(Exception):
    def __init__(self, argv0: str, timeout: float, stderr: str) -> None:
        self.stderr = stderr
        super().__init__(f"{argv0} did not finish within {timeout:g} s (killed)")


@dataclass(frozen=True)
class Finished:
    returncode: int  # negative: killed by that signal
    stderr: str
    seconds: float


async def kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the program's process group, SIGKILL it after the grace period; reap the program."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            async with asyncio.timeout(KILL_GRACE_S):
                await proc.wait()
            # The leader is gone; children of the group may remain (ssh under rsync): they get the SIGKILL too.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            return
        except TimeoutError:
            continue


async def start_group(
    argv: Sequence[str], *, stdin: int, stdout: int, env: Mapping[str, str] | None = None
) -> asyncio.subprocess.Process:
    """Start argv as the leader of a new session (stderr piped); a cancel that lands while it starts kills its group.

    asyncio's own clean-up of a start cancelled half-way kills the leader alone, then waits until every pipe
    is closed (Python 3.11 `_make_subprocess_transport`, `base_subprocess._wait`). A child the leader has
    already started (rsync's ssh) holds stderr open: the wait lasts as long as that child, and the child
    outlives us. So the start is shielded from the cancel, and the whole group is killed once it is done.
    """
    spawn = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *argv,
            stdin=stdin,
            stdout=stdout,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            env=dict(env) if env is not None else None,
        )
    )
    try:
        return await asyncio.shield(spawn)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):  # a program that could not start has nothing left to kill
            await kill_group(await spawn)
        raise


async def run_streaming(
    argv: Sequence[str],
    *,
    timeout: float,
    on_stdout: Callable[[bytes], None] | None = None,
    stdin_text: str | None = None,
    keep_stdin_open: bool = False,
    env: Mapping[str, str] | None = None,
) -> Finished:
    """Run argv to its end; raise SubprocessTimeoutError past `timeout` (the group killed).

    `keep_stdin_open`: stdin stays open until the program exits (a remote relay watches it for EOF to learn
    that we are gone); otherwise it is closed once `stdin_text` is written.
    """
    started = time.monotonic()
    proc = await start_group(
        argv,
        stdin=asyncio.subprocess.PIPE if stdin_text is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    stderr = bytearray()

    async def pump_out() -> None:
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(65536):
            if on_stdout is not None:
                on_stdout(chunk)

    async def pump_err() -> None:
        assert proc.stderr is not None
        while chunk := await proc.stderr.read(65536):
            stderr.extend(chunk)
            del stderr[:-STDERR_KEEP]

    async def feed() -> None:
        if stdin_text is None or proc.stdin is None:
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(stdin_text.encode())
            await proc.stdin.drain()
            if not keep_stdin_open:
                proc.stdin.close()

    try:
        async with asyncio.timeout(timeout):
            await asyncio.gather(feed(), pump_out(), pump_err())
            returncode = await proc.wait()
    except TimeoutError:
        await kill_group(proc)
        raise SubprocessTimeoutError(argv[0], timeout, stderr.decode(errors="replace")) from None
    except BaseException:
        await kill_group(proc)
        raise
    finally:
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
    return Finished(returncode, stderr.decode(errors="replace"), time.monotonic() - started)
