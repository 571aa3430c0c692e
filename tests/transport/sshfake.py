"""An in-process asyncssh server that stands in for a Spark's sshd.

It speaks real SSH (key exchange, host key, public-key auth, exec channels)
on 127.0.0.1, so the transport is tested against the protocol rather than a
mock. Commands are not run: each exec is split with `shlex.split`, recorded,
and answered by a few fake commands, which lets tests see the exact argv the
server received and count connections and commands in flight.
"""

from __future__ import annotations

import asyncio
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh


@dataclass
class FakeSSHServer:
    """One fake host; `start`/`stop` can be called again to restart it."""

    workdir: Path
    host_key: asyncssh.SSHKey = field(default_factory=lambda: asyncssh.generate_private_key("ssh-ed25519"))
    client_key: asyncssh.SSHKey = field(default_factory=lambda: asyncssh.generate_private_key("ssh-ed25519"))
    port: int = 0
    connections_opened: int = 0
    execs: list[list[str]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    sleeping: asyncio.Event = field(default_factory=asyncio.Event)
    requests: list[str] = field(default_factory=list)
    """Lines a `lines` session received."""
    sessions_ended: int = 0
    """`lines` sessions whose handler finished (their channel closed or stdin ended)."""
    flooded: int = 0
    """Bytes a `flood` got the channel to take."""
    _acceptor: asyncssh.SSHAcceptor | None = None
    _conns: list[asyncssh.SSHServerConnection] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def client_key_path(self) -> Path:
        path = self.workdir / "id_ed25519"
        if not path.exists():
            self.client_key.write_private_key(str(path))
        return path

    def known_hosts_line(self, key: asyncssh.SSHKey | None = None) -> str:
        public = (key or self.host_key).export_public_key().decode().split()
        return f"[127.0.0.1]:{self.port} {public[0]} {public[1]}\n"

    def write_known_hosts(self, *lines: str, name: str = "known_hosts") -> Path:
        path = self.workdir / name
        path.write_text("".join(lines))
        return path

    async def start(self) -> None:
        fake = self

        class _Server(asyncssh.SSHServer):
            def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
                fake.connections_opened += 1
                fake._conns.append(conn)

        self._acceptor = await asyncssh.create_server(
            _Server,
            "127.0.0.1",
            self.port,
            server_host_keys=[self.host_key],
            authorized_client_keys=asyncssh.import_authorized_keys(self.client_key.export_public_key().decode()),
            process_factory=self._handle,
            encoding="utf-8",
            keepalive_interval=0,
        )
        self.port = self._acceptor.get_port()

    async def stop(self) -> None:
        """Stop listening and hang up on every client, like sshd going away."""
        if self._acceptor is not None:
            self._acceptor.close()
            await self._acceptor.wait_closed()
            self._acceptor = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for conn in self._conns:
            conn.close()
        for conn in self._conns:
            await conn.wait_closed()
        self._conns.clear()

    async def _handle(self, process: asyncssh.SSHServerProcess[str]) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            argv = shlex.split(process.command or "")
            self.execs.append(argv)
            status = await self._fake_command(process, argv)
            if status is not None:
                process.exit(status)
        finally:
            self._tasks.discard(task)

    async def _fake_command(self, process: asyncssh.SSHServerProcess[str], argv: list[str]) -> int | None:
        """Act out one command; None when it already ended the channel itself."""
        name, args = argv[0], argv[1:]
        if name == "echo":
            process.stdout.write(" ".join(args) + "\n")
            return 0
        if name == "cat":
            process.stdout.write(await process.stdin.read())
            return 0
        if name == "false":
            process.stderr.write("first line\nit went wrong\n")
            return 1
        if name == "lines":
            return await self._lines(process)
        if name == "selfkill":
            process.exit_with_signal("KILL")
            return None
        if name == "sleep":
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.sleeping.set()
            try:
                await asyncio.sleep(float(args[0]))
            finally:
                self.in_flight -= 1
            return 0
        process.stderr.write(f"{name}: command not found\n")
        return 127

    async def _lines(self, process: asyncssh.SSHServerProcess[str]) -> int | None:
        """A session answering a line at a time: WORD -> WORD upper-cased; `slow` after a while; `hang` never;
        `big N` with N bytes; `two` with two lines; `quit S` says bye on stderr and exits S; `flood N` writes N
        bytes in 64 KB writes, each waiting for the channel to take it (`flooded` counts what it took); `shout N`
        writes N bytes to stderr and exits 3. EOF: exit 0."""
        try:
            while line := await process.stdin.readline():
                request = line.rstrip("\n")
                self.requests.append(request)
                word, _, arg = request.partition(" ")
                if word == "hang":
                    self.sleeping.set()
                    await process.channel.wait_closed()  # never answers: until the client closes the channel
                    return None
                if word == "slow":
                    self.in_flight += 1
                    self.max_in_flight = max(self.max_in_flight, self.in_flight)
                    self.sleeping.set()
                    await asyncio.sleep(0.2)
                    self.in_flight -= 1
                if word == "flood":
                    for _ in range(int(arg) // 65536):
                        process.stdout.write("y" * 65536)
                        await process.stdout.drain()
                        self.flooded += 65536
                    continue
                if word == "shout":
                    process.stderr.write("z" * int(arg))
                    await process.stderr.drain()
                    return 3
                if word == "big":
                    process.stdout.write("x" * int(arg) + "\n")
                elif word == "two":
                    process.stdout.write("a\nb\n")
                elif word == "quit":
                    process.stderr.write("bye\n")
                    return int(arg)
                else:
                    process.stdout.write(request.upper() + "\n")
            return 0
        except (OSError, asyncssh.Error):
            return None  # the client closed the channel
        finally:
            self.sessions_ended += 1
