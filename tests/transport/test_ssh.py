"""SSHTransport against a real in-process SSH server on loopback."""

from __future__ import annotations

import asyncio
import socket

import asyncssh
import pytest

from reconciler.errors import (
    HostKeyError,
    HostUnreachableError,
    PermanentError,
    RemoteCommandError,
    TransientError,
)
from reconciler.transport import HostTarget, SSHTransport
from reconciler.transport.ssh import tcp_keepalive

from .sshfake import FakeSSHServer

pytestmark = pytest.mark.timeout(30)


async def test_runs_command_and_reads_stdout(ssh: SSHTransport, target: HostTarget) -> None:
    result = await ssh.run(target, ["echo", "hello", "spark"])
    assert result.stdout == "hello spark\n"
    assert result.exit_status == 0
    assert result.host == "dgx1"
    assert result.argv == ("echo", "hello", "spark")
    assert result.duration_s >= 0


async def test_stdin_passes_through(ssh: SSHTransport, target: HostTarget) -> None:
    secret = "HF_TOKEN=abc\nline two\n"
    result = await ssh.run(target, ["cat"], input=secret)
    assert result.stdout == secret


async def test_no_input_means_stdin_is_closed(ssh: SSHTransport, target: HostTarget) -> None:
    # A command reading stdin must see EOF rather than hang.
    result = await ssh.run(target, ["cat"], timeout=5)
    assert result.stdout == ""


async def test_nonzero_exit_raises_with_host_argv_status_and_stderr(ssh: SSHTransport, target: HostTarget) -> None:
    with pytest.raises(RemoteCommandError) as caught:
        await ssh.run(target, ["false", "--flag"])
    err = caught.value
    assert err.host == "dgx1"
    assert err.argv == ["false", "--flag"]
    assert err.exit_status == 1
    assert err.stderr_tail.endswith("it went wrong")
    assert "dgx1" in str(err)
    assert "exit 1" in str(err)


async def test_check_false_returns_the_status(ssh: SSHTransport, target: HostTarget) -> None:
    result = await ssh.run(target, ["false"], check=False)
    assert result.exit_status == 1
    assert not result.ok
    assert "it went wrong" in result.stderr


async def test_killed_by_signal_has_no_exit_status(ssh: SSHTransport, target: HostTarget) -> None:
    result = await ssh.run(target, ["selfkill"], check=False)
    assert result.exit_status is None
    with pytest.raises(RemoteCommandError, match="killed by signal"):
        await ssh.run(target, ["selfkill"])


async def test_empty_argv_is_refused(ssh: SSHTransport, target: HostTarget) -> None:
    with pytest.raises(ValueError, match="empty"):
        await ssh.run(target, [])


async def test_one_connection_serves_sequential_and_concurrent_calls(
    ssh: SSHTransport, ssh_server: FakeSSHServer, target: HostTarget
) -> None:
    for i in range(20):
        await ssh.run(target, ["echo", str(i)])
    results = await asyncio.gather(*(ssh.run(target, ["echo", str(i)]) for i in range(20)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(20)]
    assert ssh_server.connections_opened == 1
    assert ssh.connection_count == 1


async def test_concurrent_first_calls_open_one_connection(
    ssh: SSHTransport, ssh_server: FakeSSHServer, target: HostTarget
) -> None:
    await asyncio.gather(*(ssh.run(target, ["echo", "x"]) for _ in range(20)))
    assert ssh_server.connections_opened == 1


async def test_concurrency_bound_is_respected(ssh_server: FakeSSHServer, target: HostTarget) -> None:
    known_hosts = ssh_server.write_known_hosts(ssh_server.known_hosts_line())
    transport = SSHTransport(known_hosts, [ssh_server.client_key_path], max_concurrency=2)
    try:
        await asyncio.gather(*(transport.run(target, ["sleep", "0.1"]) for _ in range(6)))
    finally:
        await transport.close()
    assert ssh_server.max_in_flight == 2
    assert len(ssh_server.execs) == 6


async def test_a_timeout_raises_host_unreachable(ssh: SSHTransport, target: HostTarget) -> None:
    # Only the timeout raises here: the command itself would end well after 10 s, with status 0.
    with pytest.raises(HostUnreachableError, match=r"timed out after 0\.2s running sleep"):
        await ssh.run(target, ["sleep", "10"], timeout=0.2)
    # The connection survives a slow command: the next call works on it.
    assert (await ssh.run(target, ["echo", "ok"])).stdout == "ok\n"


async def test_stopped_server_is_unreachable(ssh: SSHTransport, ssh_server: FakeSSHServer, target: HostTarget) -> None:
    await ssh.run(target, ["echo", "up"])
    await ssh_server.stop()
    with pytest.raises(HostUnreachableError, match="cannot connect") as caught:
        await ssh.run(target, ["echo", "down"])
    assert caught.value.host == "dgx1"


async def test_never_started_server_is_unreachable(ssh: SSHTransport, ssh_server: FakeSSHServer) -> None:
    await ssh_server.stop()
    target = HostTarget(name="dgx9", address="127.0.0.1", port=ssh_server.port)
    with pytest.raises(HostUnreachableError, match=r"cannot connect to 127\.0\.0\.1"):
        await ssh.run(target, ["echo", "x"])


async def test_drop_mid_command_is_unreachable_and_not_retried(
    ssh: SSHTransport, ssh_server: FakeSSHServer, target: HostTarget
) -> None:
    running = asyncio.create_task(ssh.run(target, ["sleep", "10"]))
    await ssh_server.sleeping.wait()
    await ssh_server.stop()
    with pytest.raises(HostUnreachableError, match="sleep"):
        await running
    assert ssh_server.execs == [["sleep", "10"]]


async def test_restarted_server_is_reconnected(
    ssh: SSHTransport, ssh_server: FakeSSHServer, target: HostTarget
) -> None:
    await ssh.run(target, ["echo", "before"])
    await ssh_server.stop()
    await ssh_server.start()  # same port, same host key
    result = await ssh.run(target, ["echo", "after"])
    assert result.stdout == "after\n"
    assert ssh_server.connections_opened == 2
    assert ssh.connection_count == 1


async def test_connection_found_dead_is_reopened_once(
    ssh: SSHTransport, ssh_server: FakeSSHServer, target: HostTarget
) -> None:
    await ssh.run(target, ["echo", "first"])
    # abort() drops the socket at once but asyncssh marks the connection
    # closed only on a later loop turn: the pool still hands it out, which is
    # the "died while idle, not noticed yet" case.
    (conn,) = ssh._conns.values()
    conn.abort()
    result = await ssh.run(target, ["echo", "second"])
    assert result.stdout == "second\n"
    assert ssh_server.connections_opened == 2
    assert ssh_server.execs == [["echo", "first"], ["echo", "second"]]


async def test_an_idle_connection_is_watched_by_the_kernel_not_by_ssh_keepalives(
    ssh: SSHTransport, target: HostTarget
) -> None:
    """TCP keepalive (60 s idle, then a probe every 20 s, dropped after 3): no daemon wake-up per
    connection while idle, a silent host still noticed within 2 minutes."""
    await ssh.run(target, ["echo", "x"])
    (conn,) = ssh._conns.values()
    sock = conn.get_extra_info("socket")
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    options = (socket.TCP_KEEPIDLE, socket.TCP_KEEPINTVL, socket.TCP_KEEPCNT, socket.TCP_USER_TIMEOUT)
    assert [sock.getsockopt(socket.IPPROTO_TCP, o) for o in options] == [60, 20, 3, 120_000]
    assert conn._keepalive_interval == 0  # asyncssh sends no keepalive request of its own


def test_tcp_keepalive_is_set_on_tcp_sockets_only() -> None:
    with socket.socket() as tcp:
        tcp_keepalive(tcp, 30, 10, 2)
        options = (socket.TCP_KEEPIDLE, socket.TCP_KEEPINTVL, socket.TCP_KEEPCNT, socket.TCP_USER_TIMEOUT)
        assert [tcp.getsockopt(socket.IPPROTO_TCP, o) for o in options] == [30, 10, 2, 50_000]
    left, right = socket.socketpair()  # a Unix socket, as under a proxy command: left alone
    with left, right:
        tcp_keepalive(left, 30, 10, 2)
        assert left.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
    tcp_keepalive(None, 30, 10, 2)


async def test_unknown_host_key_is_refused_before_any_command(ssh_server: FakeSSHServer, target: HostTarget) -> None:
    other = asyncssh.generate_private_key("ssh-ed25519")
    # Only another host is pinned; this one never was.
    line = ssh_server.known_hosts_line(other).replace("[127.0.0.1]", "[10.0.0.9]")
    known_hosts = ssh_server.write_known_hosts(line, name="other_known_hosts")
    transport = SSHTransport(known_hosts, [ssh_server.client_key_path])
    try:
        with pytest.raises(HostKeyError) as caught:
            await transport.run(target, ["echo", "x"])
    finally:
        await transport.close()
    assert caught.value.host == "dgx1"
    assert "not pinned" in caught.value.reason
    assert str(known_hosts) in caught.value.reason
    assert ssh_server.execs == []


async def test_changed_host_key_is_refused(ssh_server: FakeSSHServer, target: HostTarget) -> None:
    old_key = asyncssh.generate_private_key("ssh-ed25519")
    known_hosts = ssh_server.write_known_hosts(ssh_server.known_hosts_line(old_key), name="stale_known_hosts")
    transport = SSHTransport(known_hosts, [ssh_server.client_key_path])
    try:
        with pytest.raises(HostKeyError) as caught:
            await transport.run(target, ["echo", "x"])
    finally:
        await transport.close()
    assert "has changed" in caught.value.reason
    assert str(known_hosts) in caught.value.reason
    assert ssh_server.execs == []


@pytest.mark.parametrize(
    "argv",
    [
        ["echo", "; rm -rf /"],
        ["echo", "$(id)"],
        ["echo", "`id`"],
        ["echo", 'it\'s "quoted"'],
        ["echo", "two\nlines"],
        ["echo", "a && b | c > /tmp/x", "*", "~", "$HOME"],
        ["echo", ""],
    ],
)
async def test_shell_metacharacters_arrive_as_exact_argv(
    ssh: SSHTransport, ssh_server: FakeSSHServer, target: HostTarget, argv: list[str]
) -> None:
    await ssh.run(target, argv)
    assert ssh_server.execs == [argv]


async def test_missing_known_hosts_file_is_a_host_key_error(ssh_server: FakeSSHServer, target: HostTarget) -> None:
    missing = ssh_server.workdir / "no_such_known_hosts"
    transport = SSHTransport(missing, [ssh_server.client_key_path])
    try:
        with pytest.raises(HostKeyError, match="no_such_known_hosts"):
            await transport.run(target, ["echo", "x"])
    finally:
        await transport.close()
    assert ssh_server.execs == []


async def test_client_key_not_authorized_is_permanent(ssh_server: FakeSSHServer, target: HostTarget) -> None:
    stranger = ssh_server.workdir / "stranger_key"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(stranger))
    known_hosts = ssh_server.write_known_hosts(ssh_server.known_hosts_line())
    transport = SSHTransport(known_hosts, [stranger])
    try:
        with pytest.raises(PermanentError, match="refused with the configured client keys") as caught:
            await transport.run(target, ["echo", "x"])
    finally:
        await transport.close()
    assert not isinstance(caught.value, TransientError)
    assert ssh_server.execs == []
