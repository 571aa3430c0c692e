"""Local transport: run argv on this machine with the SSH transport's rules.

A single-host setup (the control node is the Spark) and the fast tests need
hosts without sshd. This runs the argv directly with no shell in between,
and reports results and failures exactly as `SSHTransport` does, so callers
never branch on which transport they hold. `env_for_host` lets a test or the
simulator tell hosts apart (e.g. `RIG_HOST=spark1`), the way a per-host sshd
sets environment for its sessions.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Mapping, Sequence

from reconciler.transport.base import CommandResult, HostTarget, checked, command_line, timed_out

# What a POSIX shell reports for these, so results match a command run over SSH.
_EXIT_NOT_FOUND = 127
_EXIT_NOT_EXECUTABLE = 126


class LocalTransport:
    """Runs argv lists as local subprocesses, whatever host they name."""

    def __init__(self, env_for_host: Callable[[HostTarget], Mapping[str, str]] | None = None) -> None:
        self._env_for_host = env_for_host

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

    async def close(self) -> None:
        """Nothing is pooled locally; here to satisfy `Transport`."""

    async def _spawn(self, host: HostTarget, argv: tuple[str, ...], input: str | None) -> tuple[int | None, str, str]:
        env = None
        if self._env_for_host is not None:
            env = {**os.environ, **self._env_for_host(host)}
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
