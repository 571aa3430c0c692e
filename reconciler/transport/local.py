"""Local transport: run argv on this machine with the SSH transport's rules.

A single-host setup (the control node is the Spark) and the fast tests need
hosts without sshd. This runs the argv directly with no shell in between,
and reports results and failures exactly as `SSHTransport` does, so callers
never branch on which transport they hold. `env_for_host` lets a test or the
simulator tell hosts apart (e.g. `RIG_HOST=spark1`), the way a per-host sshd
sets environment for its sessions. A session (`session`) is a subprocess
left running with its stdin open, one per host name, as over SSH.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Mapping, Sequence

from reconciler.errors import HostUnreachableError
from reconciler.transport.base import CommandResult, HostTarget, Session, checked, command_line, timed_out
from reconciler.transport.session import LineSession

# What a POSIX shell reports for these, so results match a command run over SSH.
_EXIT_NOT_FOUND = 127
_EXIT_NOT_EXECUTABLE = 126


class LocalTransport:
    """Runs argv lists as local subprocesses, whatever host they name."""

    def __init__(self, env_for_host: Callable[[HostTarget], Mapping[str, str]] | None = None) -> None:
        self._env_for_host = env_for_host
        self._sessions: dict[str, LineSession] = {}
        self._session_locks: dict[str, asyncio.Lock] = {}

    async def run(
        self,
        host: HostTarget,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float = 30.0,
        check: bool = True,
    ) -> CommandResult:
        command_line(argv)  # same argv validation as over SSH
        args = tuple(argv)
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout):
                status, stdout, stderr = await self._spawn(host, args, input)
        except TimeoutError:
            raise timed_out(host, args, timeout) from None
        except FileNotFoundError:
            status, stdout, stderr = _EXIT_NOT_FOUND, "", f"{args[0]}: command not found\n"
        except PermissionError:
            status, stdout, stderr = _EXIT_NOT_EXECUTABLE, "", f"{args[0]}: permission denied\n"
        result = CommandResult(
            host=host.name,
            argv=args,
            exit_status=status,
            stdout=stdout,
            stderr=stderr,
            duration_s=time.monotonic() - started,
        )
        return checked(result) if check else result

    async def session(self, host: HostTarget, argv: Sequence[str], *, timeout: float = 30.0) -> Session:
        command_line(argv)
        args = tuple(argv)
        async with self._session_locks.setdefault(host.name, asyncio.Lock()):
            current = self._sessions.get(host.name)
            if current is not None and current.argv == args and not current.closed:
                return current
            if current is not None:
                await current.close()
            try:
                proc = await asyncio.create_subprocess_exec(
                    *args,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    env=self._env(host),
                )
            except OSError as exc:  # not found, not executable: over SSH the shell would end it at once
                raise HostUnreachableError(host.name, f"cannot start {args[0]}: {exc.strerror or exc}") from None
            opened = LineSession(host, args, LocalPipe(proc), on_close=self._session_closed)
            self._sessions[host.name] = opened
            return opened

    def _session_closed(self, session: LineSession) -> None:
        if self._sessions.get(session.host.name) is session:
            del self._sessions[session.host.name]

    def _env(self, host: HostTarget) -> dict[str, str] | None:
        if self._env_for_host is None:
            return None
        return {**os.environ, **self._env_for_host(host)}

    async def close(self) -> None:
        """Nothing is pooled locally but the sessions: each is ended (its process killed and reaped)."""
        for session in list(self._sessions.values()):
            await session.close()

    async def _spawn(self, host: HostTarget, argv: tuple[str, ...], input: str | None) -> tuple[int | None, str, str]:
        env = self._env(host)
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if input else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        try:
            out, err = await proc.communicate(input.encode() if input else None)
        finally:
            # On timeout or cancellation, never leave the process running.
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        code = proc.returncode
        # A negative code is a signal; SSH reports no exit status for those.
        status = None if code is None or code < 0 else code
        return status, out.decode(errors="replace"), err.decode(errors="replace")


class LocalPipe:
    """A session's `Pipe` over a local subprocess (`transport/session.py`)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)

    async def drain(self) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.drain()  # BrokenPipeError / ConnectionResetError once the process ended

    async def read(self, n: int) -> bytes:
        assert self.proc.stdout is not None
        return await self.proc.stdout.read(n)

    async def finish(self, stderr_limit: int) -> tuple[int | None, bool, bytes]:
        assert self.proc.stderr is not None
        code = await self.proc.wait()
        err = await self.proc.stderr.read(stderr_limit)
        # A negative code is a signal; SSH reports no exit status for those.
        return (None if code < 0 else code), True, err

    def alive(self) -> bool:
        assert self.proc.stdout is not None
        return self.proc.returncode is None and not self.proc.stdout.at_eof()

    async def close(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()  # reaped: a local process is never left behind (and never hangs on a host)
