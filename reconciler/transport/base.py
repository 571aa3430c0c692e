"""What every transport promises: run one argv on one host, get a result; or keep one running as a session.

The executor and the probe talk to hosts only through `Transport`, so the
same code drives real Sparks over SSH, a single local host, and the
simulator. The helpers here hold the rules every transport must share: argv
is quoted with `shlex.join` (a lane field is never pasted into a shell
string), a non-zero exit names the host, argv, status and stderr, and a
timeout reads as an unreachable host so the caller retries next cycle.

A `Session` is a command left running on a host that answers one request line with one answer line
(the probe's, `facts/probe_serve.py`); `transport/session.py` holds the rules every implementation
shares (one request in flight, bounded answers, closed on anything unexpected).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from reconciler.errors import HostUnreachableError, RemoteCommandError


@dataclass(frozen=True)
class HostTarget:
    """Where to run: a logical name for errors and logs, and how to reach it."""

    name: str
    address: str
    port: int = 22
    user: str = "root"


@dataclass(frozen=True)
class CommandResult:
    """What a finished command left behind.

    `exit_status` is None when the command was killed by a signal.
    """

    host: str
    argv: tuple[str, ...]
    exit_status: int | None
    stdout: str
    stderr: str
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


class Session(Protocol):
    """A command running on a host that answers request lines (`transport/session.py` `LineSession`)."""

    @property
    def argv(self) -> tuple[str, ...]: ...

    @property
    def closed(self) -> bool:
        """True once it ended, was closed, or lost its connection: never to be asked again."""
        ...

    @property
    def answered(self) -> int:
        """Requests it answered."""
        ...

    @property
    def ended(self) -> CommandResult | None:
        """How the command ended, when it ended on its own (exit status, stderr)."""
        ...

    @property
    def idle_s(self) -> float:
        """Seconds since it opened or last answered."""
        ...

    async def request(self, line: str, *, timeout: float, limit: int) -> str:
        """One answer line for one request line; HostUnreachableError (and the session closed) otherwise."""
        ...

    async def close(self) -> None: ...


class Transport(Protocol):
    """Runs argv lists on hosts; one implementation per way of reaching them."""

    async def run(
        self,
        host: HostTarget,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float = 30.0,
        check: bool = True,
    ) -> CommandResult: ...

    async def session(self, host: HostTarget, argv: Sequence[str], *, timeout: float = 30.0) -> Session:
        """The host's session running `argv`: the open one, or a new one (one with another argv is closed
        first: a host keeps at most one). Closed by `close()`, and with the connection it runs on."""
        ...

    async def close(self) -> None: ...


def command_line(argv: Sequence[str]) -> str:
    """Quote argv into the one string SSH carries; refuse an empty command.

    A bare `str` is refused too: iterating it would run each character.
    """
    if isinstance(argv, str):
        raise TypeError("argv must be a sequence of strings, not one string")
    if not argv:
        raise ValueError("argv must not be empty")
    return shlex.join(argv)


def timed_out(host: HostTarget, argv: Sequence[str], timeout: float) -> HostUnreachableError:
    return HostUnreachableError(host.name, f"timed out after {timeout:g}s running {argv[0]}")


def checked(result: CommandResult) -> CommandResult:
    """Return the result if it exited 0, else raise the error that says why."""
    if result.exit_status != 0:
        raise RemoteCommandError(result.host, list(result.argv), result.exit_status, result.stderr)
    return result
