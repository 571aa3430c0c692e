"""A transport that keeps every command, session opened and request sent, per host, with what came back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from reconciler.errors import LanesError
from reconciler.transport.base import CommandResult, HostTarget, Session, Transport


@dataclass
class Sent:
    """One thing sent to a host: a command (`run`), a session opened (`open`), or a request on it (`request`)."""

    kind: Literal["run", "open", "request"]
    argv: list[str]
    """The command, or the session's command."""
    input: str | None
    """stdin of a command, the line of a request."""
    stdout: str = ""
    """A command's stdout, a request's answer ("" when it failed)."""
    exit_status: int | None = 0
    error: str | None = None
    """Why a request failed (the session is closed then)."""


@dataclass
class Recording:
    inner: Transport
    sent: dict[str, list[Sent]] = field(default_factory=dict)
    sessions: dict[str, list[Session]] = field(default_factory=dict)
    """Every session the transport handed out, per host, in order (held: their ids stay unique)."""

    async def run(
        self,
        host: HostTarget,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float = 30.0,
        check: bool = True,
    ) -> CommandResult:
        result = await self.inner.run(host, argv, input=input, timeout=timeout, check=check)
        self._add(host, Sent("run", list(argv), input, result.stdout, result.exit_status))
        return result

    async def session(self, host: HostTarget, argv: Sequence[str], *, timeout: float = 30.0) -> Session:
        inner = await self.inner.session(host, argv, timeout=timeout)
        opened = self.sessions.setdefault(host.name, [])
        if not any(inner is s for s in opened):
            opened.append(inner)
            self._add(host, Sent("open", list(argv), None))
        return RecordedSession(inner, self, host)

    async def close(self) -> None:
        await self.inner.close()

    def _add(self, host: HostTarget, sent: Sent) -> None:
        self.sent.setdefault(host.name, []).append(sent)

    def take(self) -> dict[str, list[Sent]]:
        sent, self.sent = self.sent, {}
        return sent


class RecordedSession:
    """The transport's session, each request and its answer noted."""

    def __init__(self, inner: Session, recording: Recording, host: HostTarget) -> None:
        self.inner = inner
        self.recording = recording
        self.host = host

    @property
    def argv(self) -> tuple[str, ...]:
        return self.inner.argv

    @property
    def closed(self) -> bool:
        return self.inner.closed

    @property
    def answered(self) -> int:
        return self.inner.answered

    @property
    def ended(self) -> CommandResult | None:
        return self.inner.ended

    @property
    def idle_s(self) -> float:
        return self.inner.idle_s

    async def request(self, line: str, *, timeout: float, limit: int) -> str:
        try:
            answer = await self.inner.request(line, timeout=timeout, limit=limit)
        except LanesError as exc:
            ended = self.inner.ended
            status = ended.exit_status if ended else None
            self.recording._add(self.host, Sent("request", list(self.argv), line, "", status, str(exc)))
            raise
        self.recording._add(self.host, Sent("request", list(self.argv), line, answer))
        return answer

    async def close(self) -> None:
        await self.inner.close()
