"""Simulated Sparks reachable over real SSH: one in-process asyncssh server per host.

The reconciler's transport must be tested against what it meets in a
fleet: a real SSH handshake, pinned host keys (a changed key is refused,
not trusted), per-host failures (a host that stops answering), and commands
that arrive as one `shlex.join`ed string. Each `SimHost` listens on its own
loopback address (all of 127.0.0.0/8 is loopback on Linux), so every host
can also serve its engine on port 8000 like a real Spark, and hands each
exec request, split back into argv, to its `SimContainerRuntime`; the probe's
long-lived session is served line by line (`probesession`).

`SimFleet` makes the keys: one host key per host, one client key, and a
known_hosts file pinning each `[address]:port`, all under `work_dir`. A
fleet of more than 254 hosts spills over into the following /24s (see
`host_addresses`); with `shared_standin=True` every container's engine is
served by one stand-in process instead of one process each (`sharedclient`),
which is what lets a thousand simulated hosts run on a laptop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

import asyncssh

from reconciler.sim import shellwords
from reconciler.sim.netstat import ListeningTable
from reconciler.sim.probesession import serve_probe_session
from reconciler.sim.registry import SimRegistry
from reconciler.sim.runtime import SimContainerRuntime
from reconciler.sim.sharedclient import SharedStandinClient

log = logging.getLogger(__name__)


MAX_SESSIONS = 10
"""sshd's default MaxSessions (sshd_config(5)): open sessions (channels) per connection. A hardened host may set
fewer (CIS benchmarks ask for 4 or less); `SimHost.max_sessions` stages that."""


class SimTarget(NamedTuple):
    """Where a simulated host answers SSH: what a fleet file would say about it."""

    address: str
    port: int
    user: str


class _Server(asyncssh.SSHServer):
    """Per-connection hooks: key auth for the one user, and connection tracking."""

    def __init__(self, host: SimHost) -> None:
        self._host = host
        self._conn: asyncssh.SSHServerConnection | None = None
        self._sessions = 0

    def session_requested(self) -> asyncssh.SSHServerProcess[str]:
        # sshd refuses a connection's session past MaxSessions (10 unless sshd_config says otherwise,
        # sshd_config(5)) with "administratively prohibited" and the text "open failed" (OpenSSH serverloop.c,
        # server_input_channel_open), until one of them closes.
        if self._sessions >= self._host.max_sessions:
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, "open failed")
        self._sessions += 1
        self._host.most_sessions = max(self._host.most_sessions, self._sessions)
        return asyncssh.SSHServerProcess(self._counted, None, 0, False)

    async def _counted(self, process: asyncssh.SSHServerProcess[str]) -> None:
        try:
            await self._host.handle(process)
        finally:
            self._sessions -= 1

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        self._host.connections.add(conn)
        self._host.handshakes += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self._host.connections.discard(self._conn)

    def begin_auth(self, username: str) -> bool:
        # Like sshd with one authorized_keys file: only the fleet's user has one.
        if username == self._host.user and self._conn is not None:
            self._conn.set_authorized_keys(self._host.authorized_keys)
        return True


class SimHost:
    """One simulated Spark's SSH server."""

    def __init__(
        self,
        name: str,
        address: str,
        port: int,
        runtime: SimContainerRuntime,
        *,
        user: str,
        host_key: asyncssh.SSHKey,
        authorized_keys: asyncssh.SSHAuthorizedKeys,
    ) -> None:
        self.name = name
        self.address = address
        self.port = port
        self.runtime = runtime
        self.user = user
        self.host_key = host_key
        self.authorized_keys = authorized_keys
        self.commands: list[list[str]] = []
        """Every command the host was asked to run: an exec'd command line, or a request line a session
        answered or refused (recorded as its session's argv: one probe either way). A session's start is a
        channel (`channels`), not a command."""
        self.connections: set[asyncssh.SSHServerConnection] = set()
        self.handshakes = 0
        """Connections ever accepted: a client that pools its connections adds none per cycle."""
        self.channels = 0
        """Exec channels ever opened (commands run, sessions started): a probe on an open session adds none."""
        self.requests = 0
        """Request lines received by sessions (the probe's round trips on its session)."""
        self.bytes_in = 0
        """Bytes of every command line, stdin and request line received (what a probe costs on the wire, less
        SSH framing)."""
        self.bytes_out = 0
        """Bytes of every stdout and stderr sent back."""
        self.max_sessions = MAX_SESSIONS
        """Sessions one connection may hold open at once (sshd's MaxSessions)."""
        self.most_sessions = 0
        """The most sessions one connection held open at once: a client that bounds its channels stays under."""
        self._acceptor: asyncssh.SSHAcceptor | None = None

    @property
    def serving(self) -> bool:
        return self._acceptor is not None

    async def start(self) -> None:
        if self._acceptor is not None:
            return
        sock = _bound_socket(self.address, self.port)
        try:
            self._acceptor = await asyncssh.listen(
                sock=sock,
                server_factory=lambda: _Server(self),
                server_host_keys=[self.host_key],
            )
        except BaseException:
            sock.close()
            raise

    async def stop(self) -> None:
        """Stop listening and drop every open connection: the host stops answering."""
        acceptor, self._acceptor = self._acceptor, None
        if acceptor is not None:
            acceptor.close()
            await acceptor.wait_closed()
        for conn in list(self.connections):
            conn.close()
            await conn.wait_closed()
        self.connections.clear()

    async def handle(self, process: asyncssh.SSHServerProcess[str]) -> None:
        command = process.command
        if command is None:
            process.stderr.write("sim: no interactive shell on a simulated host\n")
            process.exit(1)
            return
        try:
            argv = shellwords.split(command)  # shlex.split's result, without its cost on the 7.6 kB probe
        except ValueError as exc:
            process.stderr.write(f"sh: syntax error: {exc}\n")
            process.exit(2)
            return
        self.channels += 1
        if self.runtime.is_probe_session(argv):
            self.bytes_in += len(command.encode())
            await serve_probe_session(self, process, argv)
            return
        self.commands.append(argv)
        stdin = await process.stdin.read() if self.runtime.wants_stdin(argv) else None
        self.bytes_in += len(command.encode()) + len((stdin or "").encode())
        answer = await self.until_gone(process, argv, stdin)
        if answer is None:
            return
        status, out, err = answer
        self.bytes_out += len(out.encode()) + len(err.encode())
        try:
            process.stdout.write(out)
            process.stderr.write(err)
            process.exit(status)
        except (OSError, asyncssh.Error):
            pass  # the client gave up (timeout, dropped connection) before the answer

    async def until_gone(
        self, process: asyncssh.SSHServerProcess[str], argv: list[str], stdin: str | None
    ) -> tuple[int, str, str] | None:
        """The runtime's answer to `argv`, or None when the client went away first.

        sshd hangs up a session's command when its client goes away; a command still waiting to run
        (a slow host) then never runs, so it is cancelled here the same way."""
        work = asyncio.ensure_future(self.runtime.execute(argv, stdin))
        gone = asyncio.ensure_future(process.channel.wait_closed())
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
        gone.cancel()
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await work
            return None
        try:
            return work.result()
        except Exception as exc:  # a bug in the sim must reach the test as a failed command
            log.exception("sim host %s failed on %s", self.name, argv[:3])
            return 1, "", f"sim: internal error: {exc!r}\n"


def host_addresses(base_address: str, count: int) -> list[str]:
    """`count` addresses from `base_address`: "a.b.c." gives a.b.c.1 ... a.b.c.254, then a.b.(c+1).1 ...;
    "a.b." starts at a.b.0.1. Each /24 holds 254 hosts (no .0, no .255: those read like network and
    broadcast addresses in logs, although all of 127/8 answers on Linux)."""
    parts = base_address.rstrip(".").split(".")
    if len(parts) not in (2, 3) or not all(p.isdigit() and int(p) <= 255 for p in parts):
        raise ValueError(f"base address {base_address!r} must look like '127.77.0.' or '127.77.'")
    first, second, third = int(parts[0]), int(parts[1]), int(parts[2]) if len(parts) == 3 else 0
    last_block = third + (count - 1) // 254 if count else third
    if last_block > 255:
        raise ValueError(f"{count} hosts do not fit after {base_address} (254 per /24, up to {first}.{second}.255.)")
    return [f"{first}.{second}.{third + i // 254}.{i % 254 + 1}" for i in range(count)]


class SimFleet:
    """Several simulated Sparks on 127.77.0.1, .2, ... sharing one SSH port and one registry."""

    def __init__(
        self,
        names: Sequence[str],
        *,
        base_address: str = "127.77.0.",
        port: int | None = None,
        registry: SimRegistry,
        work_dir: Path,
        user: str = "lanes",
        shared_standin: bool = False,
    ) -> None:
        self.names = list(names)
        self.registry = registry
        self.work_dir = Path(work_dir)
        self.user = user
        self.addresses = dict(zip(self.names, host_addresses(base_address, len(self.names)), strict=True))
        self.port = port or 0
        self.known_hosts_path = self.work_dir / "known_hosts"
        self.client_key_path = self.work_dir / "client_key"
        self._hosts: dict[str, SimHost] = {}
        self.standin: SharedStandinClient | None = (
            SharedStandinClient(self.work_dir / "shared-standin") if shared_standin else None
        )
        """The one stand-in process serving every host's containers, when `shared_standin` is set."""
        # A big (shared stand-in) fleet reads the kernel's socket table once a second for all its hosts,
        # not once per probe; the engines' sockets change only through docker commands, which refresh it.
        self.ports = ListeningTable(max_age_s=1.0 if shared_standin else 0.0)
        self.control_addresses: dict[str, str] = {}
        """Host name -> the address its host file gives (`hostfacts.apply_state` sets it): what lanes renders
        for a rank's rendezvous where a lane has no data-plane path, reached here on the host's own address."""

    async def __aenter__(self) -> SimFleet:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        client_key = asyncssh.generate_private_key("ssh-ed25519", comment="lanes-sim-client")
        _write_private(self.client_key_path, client_key.export_private_key())
        public = client_key.export_public_key().decode()
        (self.work_dir / "client_key.pub").write_text(public)
        authorized = asyncssh.import_authorized_keys(public)
        if not self.port:
            self.port = _free_port(list(self.addresses.values()))
        try:
            if self.standin is not None:
                await self.standin.start()
            for name, address in self.addresses.items():
                runtime = SimContainerRuntime(
                    name, address, self.registry, self.work_dir / name, shared=self.standin, ports=self.ports
                )
                runtime.daemon.peers = self.peer_addresses
                host = SimHost(
                    name,
                    address,
                    self.port,
                    runtime,
                    user=self.user,
                    host_key=asyncssh.generate_private_key("ssh-ed25519", comment=f"sim-{name}"),
                    authorized_keys=authorized,
                )
                self._hosts[name] = host
                await host.start()
        except BaseException:
            await self.close()
            raise
        self._write_known_hosts()

    def _write_known_hosts(self) -> None:
        lines = []
        for host in self._hosts.values():
            where = host.address if self.port == 22 else f"[{host.address}]:{self.port}"
            key = host.host_key.export_public_key().decode().split()[:2]
            lines.append(f"{where} {' '.join(key)}\n")
        self.known_hosts_path.write_text("".join(lines))

    @property
    def targets(self) -> dict[str, SimTarget]:
        """name -> (address, port, user), what a fleet file would say for each host."""
        return {name: SimTarget(address, self.port, self.user) for name, address in self.addresses.items()}

    def connect_options(self, name: str) -> dict[str, Any]:
        """Keyword arguments for `asyncssh.connect` to reach host `name`."""
        address, port, user = self.targets[name]
        return {
            "host": address,
            "port": port,
            "username": user,
            "client_keys": [str(self.client_key_path)],
            "known_hosts": str(self.known_hosts_path),
        }

    def host(self, name: str) -> SimHost:
        return self._hosts[name]

    def peer_addresses(self) -> dict[str, str]:
        """Every address a host holds (its data-plane addresses as its facts say now, its own) -> the
        simulated address it is reached on: where a rank goes that dials another host's rendered address."""
        pairs = {address: self._hosts[name].address for name, address in self.control_addresses.items()}
        for host in self._hosts.values():
            pairs[host.address] = host.address
            for link in host.runtime.facts.info.links.values():
                for cidr in link.ipv4 if link.operstate == "up" else ():  # no carrier: not reached on it
                    pairs[cidr.partition("/")[0]] = host.address
        return pairs

    def runtime(self, name: str) -> SimContainerRuntime:
        return self._hosts[name].runtime

    def commands_seen(self, name: str) -> list[list[str]]:
        return list(self._hosts[name].commands)

    async def stop_host(self, name: str) -> None:
        await self._hosts[name].stop()
        self.ports.invalidate()

    async def start_host(self, name: str) -> None:
        await self._hosts[name].start()
        self.ports.invalidate()

    async def replace_host_key(self, name: str) -> None:
        """Restart `name` with a new host key; known_hosts keeps the old one (a client must refuse)."""
        host = self._hosts[name]
        await host.stop()
        host.host_key = asyncssh.generate_private_key("ssh-ed25519", comment=f"sim-{name}-replaced")
        await host.start()

    async def close(self) -> None:
        """Stop every SSH server, then every container of every host, then the shared stand-in."""
        for host in self._hosts.values():
            await host.stop()
        for host in self._hosts.values():
            await host.runtime.shutdown()
        if self.standin is not None:
            await self.standin.close()


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _bound_socket(address: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # A restarted host rebinds its port while old connections sit in TIME_WAIT.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address, port))
    except OSError:
        sock.close()
        raise
    return sock


def _free_port(addresses: Sequence[str]) -> int:
    """A port that is free on every address, so all hosts share one SSH port."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((addresses[0], 0))
            port: int = probe.getsockname()[1]
        try:
            for address in addresses:
                with socket.socket() as s:
                    s.bind((address, port))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no port free on all {len(addresses)} addresses from {addresses[0]} to {addresses[-1]}")
