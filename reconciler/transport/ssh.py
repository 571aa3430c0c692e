"""SSH transport: a pool of pinned-key asyncssh connections, one per host.

The daemon talks to every Spark each cycle; opening a fresh SSH connection
per command would cost a key exchange each time and hammer sshd's
MaxStartups. So each (address, port, user) keeps one connection, opened
lazily under a per-key lock (concurrent first calls share one connect) and
multiplexing commands as channels. A global semaphore bounds commands in
flight across the fleet. A host may also keep one long-lived command as a
session on its connection (`session`, `transport/session.py`): the probe's,
answering a request line per probe on a channel that stays open.

Trust is explicit: host keys must be pinned in the known_hosts file we are
given (no trust on first use), and we log in with the given client keys only
(no agent, no password, no ~/.ssh/config), so the daemon behaves the same
whoever's environment starts it.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Sequence
from pathlib import Path

import asyncssh
import structlog

from reconciler.errors import HostKeyError, HostUnreachableError, PermanentError
from reconciler.transport.base import CommandResult, HostTarget, Session, checked, command_line, timed_out
from reconciler.transport.session import LineSession
from reconciler.transport.sshkeys import ClientKeys
from reconciler.transport.sshlean import share_options, shared_line, shed_handshake_state
from reconciler.transport.sshpipe import COMMAND_OUTPUT_MAX_BYTES, Ended, SSHPipe, run_command

log = structlog.get_logger(__name__)

_PoolKey = tuple[str, int, str]

CIPHERS = "^aes128-gcm@openssh.com,aes256-gcm@openssh.com"
"""AES-GCM first, then asyncssh's defaults ('^' prepends): every OpenSSH server offers it, and
asyncssh's chacha20-poly1305 builds three cipher contexts per packet in Python, where AES-GCM is
one call; a no-op resync of 1,000 hosts spent 1.46 s of CPU on its probes with chacha20, 1.05 s
with AES-GCM. Both are AEAD ciphers; this is a preference, any server still negotiates."""

KEEPALIVE_IDLE_S = 60
KEEPALIVE_INTERVAL_S = 20
KEEPALIVE_COUNT = 3
"""TCP keepalive of every pooled connection: after 60 s without traffic the kernel probes the host
every 20 s and drops the connection after 3 unanswered probes, so a host that went away silently
is noticed within 2 minutes, before the next resync (5 min by default) would wait on it.

The kernel does this, not the daemon: SSH-level keepalives (asyncssh's `keepalive_interval`) wake
the daemon to encrypt, send, receive and decrypt a request per connection, which on a 1,000-host
fleet was most of its idle CPU (every 60 s, 130-180 ms in a burst: 0.25-0.3 % of a core; every
15 s, 3 %). A TCP probe costs the daemon nothing and keeps NAT and firewall state alive as well."""


COMMANDS_PER_HOST = 8
"""Commands one host runs at once over its connection. sshd refuses a connection's session past MaxSessions
(10 by default, sshd_config(5)) with "open failed"; the host's probe session holds one for good, and one is left
spare for a probe session reopening while its old channel closes. A command past the bound waits its turn (its
timeout starts when it runs), where it would have failed. Hosts hardened below the default (CIS: MaxSessions 4)
need `max_per_host` lowered to their MaxSessions less two."""


class _StaleConnectionError(Exception):
    """The pooled connection died before our channel opened: safe to reconnect."""


class SSHTransport:
    """Runs argv lists on hosts over pooled asyncssh connections."""

    def __init__(
        self,
        known_hosts: Path,
        client_keys: Sequence[Path],
        *,
        max_concurrency: int = 64,
        max_per_host: int = COMMANDS_PER_HOST,
        connect_timeout: float = 10.0,
        keepalive_idle_s: int = KEEPALIVE_IDLE_S,
        keepalive_interval_s: int = KEEPALIVE_INTERVAL_S,
        keepalive_count: int = KEEPALIVE_COUNT,
    ) -> None:
        if not client_keys:
            raise ValueError("SSHTransport needs at least one client key")
        self._known_hosts = Path(known_hosts)
        self._client_keys = ClientKeys([str(p) for p in client_keys])
        self._connect_timeout = connect_timeout
        self._keepalive = (keepalive_idle_s, keepalive_interval_s, keepalive_count)
        self._slots = asyncio.Semaphore(max_concurrency)
        self._max_per_host = max_per_host
        self._host_slots: dict[_PoolKey, asyncio.Semaphore] = {}
        self._conns: dict[_PoolKey, asyncssh.SSHClientConnection] = {}
        self._locks: dict[_PoolKey, asyncio.Lock] = {}
        self._pinned: tuple[str, asyncssh.SSHKnownHosts] | None = None  # the file's text, parsed
        self._sessions: dict[_PoolKey, LineSession] = {}
        self._session_locks: dict[_PoolKey, asyncio.Lock] = {}

    @property
    def connection_count(self) -> int:
        """Open pooled connections (for tests and metrics)."""
        return sum(1 for conn in self._conns.values() if not conn.is_closed())

    async def run(
        self,
        host: HostTarget,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float = 30.0,
        check: bool = True,
    ) -> CommandResult:
        command_line(argv)  # refuse a bad argv before waiting for a slot
        args = tuple(argv)
        host_slots = self._host_slots.setdefault(_pool_key(host), asyncio.Semaphore(self._max_per_host))
        # The host's own bound first: a command waiting for its host holds none of the fleet's slots.
        async with host_slots, self._slots:
            started = time.monotonic()
            # The timeout starts once we hold a slot: waiting behind other
            # hosts' commands is not this host being unreachable.
            try:
                async with asyncio.timeout(timeout):
                    completed = await self._execute(host, args, input)
            except TimeoutError:
                raise timed_out(host, args, timeout) from None
            duration = time.monotonic() - started
        # A signal leaves exit_status at -1 in asyncssh; we report "no status".
        status = None if completed.exit_signal else completed.exit_status
        result = CommandResult(
            host=host.name,
            argv=args,
            exit_status=status,
            stdout=completed.stdout,
            stderr=completed.stderr,
            duration_s=duration,
        )
        return checked(result) if check else result

    async def session(self, host: HostTarget, argv: Sequence[str], *, timeout: float = 30.0) -> Session:
        command_line(argv)
        args = tuple(argv)
        key = _pool_key(host)
        async with self._session_locks.setdefault(key, asyncio.Lock()):  # concurrent callers share one open
            current = self._sessions.get(key)
            if current is not None and current.argv == args and not current.closed:
                return current
            if current is not None:
                await current.close()  # ended, or another program (a new state folder): one session per host
            async with self._slots:
                try:
                    async with asyncio.timeout(timeout):
                        pipe = await self._open_session(host, args)
                except TimeoutError:
                    raise timed_out(host, args, timeout) from None
            opened = LineSession(host, args, pipe, on_close=self._session_closed, slots=self._slots)
            self._sessions[key] = opened
            return opened

    def _session_closed(self, session: LineSession) -> None:
        key = _pool_key(session.host)
        if self._sessions.get(key) is session:
            del self._sessions[key]

    async def _open_session(self, host: HostTarget, argv: tuple[str, ...]) -> SSHPipe:
        # As `_execute`: a connection found dead when the channel opens is replaced once (nothing was sent).
        for attempt in (1, 2):
            conn = await self._connection(host)
            try:
                # stdin stays open (the requests); bytes, not text: the session bounds and decodes its answers.
                pipe = await SSHPipe.open(conn, shared_line(argv))
            except asyncssh.ChannelOpenError as exc:
                if exc.code != asyncssh.OPEN_CONNECT_FAILED:
                    raise HostUnreachableError(host.name, f"cannot open a session: {exc.reason}") from None
                await self._discard(host, conn)
                if attempt == 2:
                    raise HostUnreachableError(host.name, f"connection lost: {exc.reason}") from None
                log.info("ssh.reconnect", host=host.name, reason=exc.reason)
                continue
            except (asyncssh.DisconnectError, OSError) as exc:
                if conn.is_closed():
                    await self._discard(host, conn)
                raise HostUnreachableError(host.name, f"connection lost starting {argv[0]}: {exc}") from None
            return pipe
        raise AssertionError("unreachable")  # pragma: no cover

    async def close(self) -> None:
        for session in list(self._sessions.values()):
            await session.close()
        conns = list(self._conns.values())
        self._conns.clear()
        for conn in conns:
            conn.close()
        for conn in conns:
            await conn.wait_closed()

    async def _execute(self, host: HostTarget, argv: tuple[str, ...], input: str | None) -> Ended:
        # A connection that died while idle is noticed only when we open a
        # channel on it; the command was never sent, so one reconnect is safe.
        # A drop after the command was sent is not retried: it may have run.
        for attempt in (1, 2):
            conn = await self._connection(host)
            try:
                return await self._run_on(conn, host, argv, input)
            except _StaleConnectionError as exc:
                await self._discard(host, conn)
                if attempt == 2:
                    raise HostUnreachableError(host.name, f"connection lost: {exc}") from None
                log.info("ssh.reconnect", host=host.name, reason=str(exc))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _run_on(
        self,
        conn: asyncssh.SSHClientConnection,
        host: HostTarget,
        argv: tuple[str, ...],
        input: str | None,
    ) -> Ended:
        try:
            # Without input, stdin gets EOF at once so a command that reads
            # it cannot hang waiting for us.
            completed = await run_command(conn, command_line(argv), input)
        except asyncssh.ChannelOpenError as exc:
            if exc.code == asyncssh.OPEN_CONNECT_FAILED:
                raise _StaleConnectionError(exc.reason) from None
            raise HostUnreachableError(host.name, f"cannot open a session: {exc.reason}") from None
        except (asyncssh.DisconnectError, OSError) as exc:
            if conn.is_closed():
                await self._discard(host, conn)
            raise HostUnreachableError(host.name, f"connection lost running {argv[0]}: {exc}") from None
        if completed.overflowed:
            raise PermanentError(
                f"{host.name}: {argv[0]} printed more than {COMMAND_OUTPUT_MAX_BYTES >> 20} MiB; it was stopped "
                "and its output refused"
            )
        if completed.exit_status is None and completed.exit_signal is None:
            # sshd reports every command's end (an exit status or a signal); a session closed without either
            # lost its connection, whose own close may not have reached us yet. Not "killed by a signal".
            if conn.is_closed():
                await self._discard(host, conn)
            raise HostUnreachableError(host.name, f"connection dropped while running {argv[0]}")
        return completed

    async def _connection(self, host: HostTarget) -> asyncssh.SSHClientConnection:
        key = _pool_key(host)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            conn = self._conns.get(key)
            if conn is not None and not conn.is_closed():
                return conn
            conn = await self._connect(host)
            self._conns[key] = conn
            return conn

    async def _discard(self, host: HostTarget, conn: asyncssh.SSHClientConnection) -> None:
        key = _pool_key(host)
        if self._conns.get(key) is conn:
            del self._conns[key]
        session = self._sessions.get(key)
        if session is not None and isinstance(session.pipe, SSHPipe) and session.pipe.conn is conn:
            await session.close()  # it runs on the connection going away
        conn.close()
        await conn.wait_closed()

    def _pinned_keys(self, host: HostTarget) -> asyncssh.SSHKnownHosts:
        """The known_hosts file, parsed again only when its text changes.

        Given the path, asyncssh reads and parses the whole file on every
        connect: with a thousand hosts pinned, the daemon's first cycle spent
        some 80 s of CPU decoding a million keys. Reading the text each time
        keeps a re-pinned key effective at the next connect, as before.
        """
        try:
            text = self._known_hosts.read_text()
        except OSError:
            raise HostKeyError(
                host.name, f"cannot read known_hosts file {self._known_hosts}: no host key is pinned"
            ) from None
        if self._pinned is None or self._pinned[0] != text:
            try:
                self._pinned = (text, asyncssh.import_known_hosts(text))
            except ValueError as exc:
                raise PermanentError(f"{host.name}: cannot parse known_hosts file {self._known_hosts}: {exc}") from None
        return self._pinned[1]

    async def _connect(self, host: HostTarget) -> asyncssh.SSHClientConnection:
        where = f"{host.address}:{host.port}"
        known_hosts = self._pinned_keys(host)
        try:
            client_keys = self._client_keys.get()  # parsed once, again when a key file changes (sshkeys.py)
            conn = await asyncssh.connect(
                host.address,
                host.port,
                username=host.user,
                known_hosts=known_hosts,
                client_keys=client_keys,
                agent_path=None,
                password=None,
                preferred_auth="publickey",
                config=None,
                connect_timeout=self._connect_timeout,
                encryption_algs=CIPHERS,
                keepalive_interval=0,  # the kernel's TCP keepalive instead: see KEEPALIVE_IDLE_S
                tcp_keepalive=True,
            )
        except asyncssh.HostKeyNotVerifiable:
            raise HostKeyError(host.name, self._host_key_reason(host)) from None
        except asyncssh.PermissionDenied as exc:
            # Not transient: retrying will not make the server accept our keys.
            raise PermanentError(
                f"{host.name}: ssh login as {host.user} at {where} refused with the configured "
                f"client keys: {exc.reason}"
            ) from None
        except TimeoutError:  # before OSError, its base class
            raise HostUnreachableError(
                host.name, f"connect to {where} timed out after {self._connect_timeout:g}s"
            ) from None
        except OSError as exc:
            if exc.filename is None:  # a socket error: the host, not our files
                raise HostUnreachableError(host.name, f"cannot connect to {where}: {exc}") from None
            if Path(exc.filename) == self._known_hosts:
                raise HostKeyError(
                    host.name, f"cannot read known_hosts file {self._known_hosts}: no host key is pinned"
                ) from None
            raise PermanentError(f"{host.name}: cannot read ssh client key {exc.filename}: {exc}") from None
        except ValueError as exc:  # asyncssh.KeyImportError and friends: an unreadable key file
            raise PermanentError(f"{host.name}: cannot load ssh client keys: {exc}") from None
        except asyncssh.Error as exc:
            raise HostUnreachableError(host.name, f"cannot connect to {where}: {exc.reason}") from None
        tcp_keepalive(conn.get_extra_info("socket"), *self._keepalive)
        shed_handshake_state(conn)  # kept for good: what the handshake left is not (sshlean.py)
        share_options(conn)
        log.info("ssh.connected", host=host.name, address=where, user=host.user)
        return conn

    def _host_key_reason(self, host: HostTarget) -> str:
        """Tell "never pinned" from "changed": the second may be an attack."""
        where = f"{host.address}:{host.port}"
        try:
            pinned = asyncssh.read_known_hosts(str(self._known_hosts))
        except (OSError, ValueError) as exc:
            return f"cannot read known_hosts file {self._known_hosts}: {exc}"
        host_keys, ca_keys, *_ = pinned.match(host.address, host.address, host.port)
        if host_keys or ca_keys:
            return (
                f"the host key of {where} has changed: it does not match the key pinned in "
                f"{self._known_hosts} (possible man-in-the-middle; re-pin only if the host was reinstalled)"
            )
        return f"the host key of {where} is not pinned in {self._known_hosts} (no trust on first use)"


def tcp_keepalive(sock: socket.socket | None, idle_s: int, interval_s: int, count: int) -> None:
    """Have the kernel probe an idle connection and drop it when the peer stops answering.

    TCP_USER_TIMEOUT gives data sent and never acknowledged the same bound, so a command written
    to a host that vanished does not keep the connection for the ~15 minutes of retransmissions.
    """
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return  # not TCP: nothing to probe
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, count)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, (idle_s + interval_s * count) * 1000)


def _pool_key(host: HostTarget) -> _PoolKey:
    return (host.address, host.port, host.user)
