"""Sessions (`Transport.session`): a command left running that answers one request line at a time.

Over SSH against the in-process server (its `lines` command), and locally as a subprocess: several requests
share one channel, one request is in flight at a time, and a timeout, an answer over the bound, more than one
line, the command's end or the connection's loss closes the session (the next caller gets a fresh one).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncssh
import pytest

from reconciler.errors import HostUnreachableError, PermanentError
from reconciler.transport import HostTarget, LocalTransport, SSHTransport
from reconciler.transport.local import LocalPipe
from reconciler.transport.session import STDERR_MAX_BYTES, LineSession
from reconciler.transport.sshkeys import ClientKeys
from reconciler.transport.sshpipe import BUFFER_MAX_BYTES, SSHPipe

from .sshfake import FakeSSHServer

pytestmark = pytest.mark.timeout(30)

LINES = ["lines"]


async def test_several_requests_share_one_channel(
    ssh: SSHTransport, ssh_server: FakeSSHServer, target: HostTarget
) -> None:
    session = await ssh.session(target, LINES)
    answers = [await session.request(f"{w}\n", timeout=5, limit=100) for w in ("one", "two-words here", "three")]
    assert answers == ["ONE", "TWO-WORDS HERE", "THREE"]
    assert await ssh.session(target, LINES) is session  # the open one, again
    assert ssh_server.execs == [LINES]  # one channel, one exec, for three requests
    assert (session.answered, session.closed, session.ended) == (3, False, None)


async def test_one_request_at_a_time(ssh: SSHTransport, ssh_server: FakeSSHServer, target: HostTarget) -> None:
    session = await ssh.session(target, LINES)
    both = await asyncio.gather(*(session.request(f"slow {i}\n", timeout=5, limit=100) for i in range(2)))
    assert both == ["SLOW 0", "SLOW 1"]
    assert ssh_server.max_in_flight == 1


async def test_a_hung_answer_times_out_and_closes_the_session(
    ssh: SSHTransport, ssh_server: FakeSSHServer, target: HostTarget
) -> None:
    session = await ssh.session(target, LINES)
    with pytest.raises(HostUnreachableError, match=r"timed out after 0\.3s"):
        await session.request("hang\n", timeout=0.3, limit=100)
    assert session.closed
    for _ in range(100):  # the host sees its channel closed (sshd hangs up on the program)
        if ssh_server.sessions_ended:
            break
        await asyncio.sleep(0.05)
    assert ssh_server.sessions_ended == 1
    with pytest.raises(HostUnreachableError, match="closed before the request"):
        await session.request("again\n", timeout=5, limit=100)  # never used again
    fresh = await ssh.session(target, LINES)
    assert fresh is not session
    assert await fresh.request("again\n", timeout=5, limit=100) == "AGAIN"
    assert ssh_server.requests == ["hang", "again"]  # the closed session sent nothing


@pytest.mark.parametrize(("line", "why"), [("big 5000\n", "more than 1000 bytes"), ("two\n", "more than one line")])
async def test_an_oversized_or_second_line_is_refused_and_closes_the_session(
    ssh: SSHTransport, target: HostTarget, line: str, why: str
) -> None:
    session = await ssh.session(target, LINES)
    assert await session.request("big 1000\n", timeout=5, limit=1000) == "x" * 1000  # at the bound: answered
    with pytest.raises(HostUnreachableError, match=why):
        await session.request(line, timeout=5, limit=1000)
    assert session.closed


async def test_a_command_that_ends_says_how(ssh: SSHTransport, target: HostTarget) -> None:
    session = await ssh.session(target, LINES)
    with pytest.raises(HostUnreachableError, match=r"ended without answering \(exit 3\): bye"):
        await session.request("quit 3\n", timeout=5, limit=100)
    assert session.ended is not None
    assert (session.ended.exit_status, session.ended.stderr) == (3, "bye\n")
    assert session.closed


async def test_a_dropped_connection_closes_the_session_and_the_next_opens_anew(
    ssh: SSHTransport, ssh_server: FakeSSHServer, target: HostTarget
) -> None:
    session = await ssh.session(target, LINES)
    assert await session.request("before\n", timeout=5, limit=100) == "BEFORE"
    await ssh_server.stop()
    await ssh_server.start()  # same port, same host key
    with pytest.raises(HostUnreachableError, match="connection lost"):
        await session.request("lost\n", timeout=5, limit=100)
    assert session.ended is None  # no end was reported: not "the program exited"
    fresh = await ssh.session(target, LINES)
    assert await fresh.request("after\n", timeout=5, limit=100) == "AFTER"
    assert ssh_server.connections_opened == 2


async def test_another_command_replaces_the_hosts_session(ssh: SSHTransport, target: HostTarget) -> None:
    old = await ssh.session(target, LINES)
    new = await ssh.session(target, [*LINES, "v2"])
    assert old.closed
    assert await new.request("x\n", timeout=5, limit=100) == "X"


async def test_closing_the_transport_closes_its_sessions(
    ssh: SSHTransport, ssh_server: FakeSSHServer, target: HostTarget
) -> None:
    session = await ssh.session(target, LINES)
    assert await session.request("x\n", timeout=5, limit=100) == "X"
    await ssh.close()
    assert session.closed
    for _ in range(100):
        if ssh_server.sessions_ended:
            break
        await asyncio.sleep(0.05)
    assert ssh_server.sessions_ended == 1


async def test_client_keys_are_loaded_once_and_again_when_the_file_changes(
    ssh: SSHTransport, ssh_server: FakeSSHServer, target: HostTarget
) -> None:
    await ssh.run(target, ["echo", "first"])
    await ssh_server.stop()
    await ssh_server.start()
    await ssh.run(target, ["echo", "second"])  # a second connection, the same parsed keys
    assert ssh_server.connections_opened == 2
    assert ssh._client_keys.loads == 1
    # A key the host does not authorize, written over the file: picked up at the next connect.
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(ssh_server.client_key_path))
    await ssh_server.stop()
    await ssh_server.start()
    with pytest.raises(PermanentError, match="refused with the configured client keys"):
        await ssh.run(target, ["echo", "third"])
    assert ssh._client_keys.loads == 2


def test_client_keys_are_kept_while_the_files_are_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "key"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(path))
    keys = ClientKeys([str(path)])
    first = keys.get()
    assert keys.get() is first
    assert keys.loads == 1
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(path))
    second = keys.get()
    assert keys.loads == 2
    assert second[0].public_data != first[0].public_data
    path.unlink()
    with pytest.raises(FileNotFoundError):
        keys.get()


# -- locally ----------------------------------------------------------------------------------------------------

ECHO = "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line.upper()); sys.stdout.flush()\n"
HANG = "import sys, time\nsys.stdin.readline()\ntime.sleep(60)\n"


@pytest.fixture
async def local() -> AsyncIterator[LocalTransport]:
    transport = LocalTransport()
    try:
        yield transport
    finally:
        await transport.close()


async def test_a_local_session_answers_on_one_process_and_is_reaped_when_closed(local: LocalTransport) -> None:
    target = HostTarget("local", "127.0.0.1")
    session = await local.session(target, [sys.executable, "-c", ECHO])
    assert [await session.request(f"{w}\n", timeout=10, limit=100) for w in ("a", "b")] == ["A", "B"]
    assert await local.session(target, [sys.executable, "-c", ECHO]) is session
    assert isinstance(session.pipe, LocalPipe)  # type: ignore[attr-defined]
    proc = session.pipe.proc  # type: ignore[attr-defined]
    await local.close()
    assert session.closed
    assert proc.returncode is not None


async def test_a_hung_local_session_times_out_and_its_process_is_killed(local: LocalTransport) -> None:
    target = HostTarget("local", "127.0.0.1")
    session = await local.session(target, [sys.executable, "-c", HANG])
    proc = session.pipe.proc  # type: ignore[attr-defined]
    with pytest.raises(HostUnreachableError, match="timed out"):
        await session.request("x\n", timeout=0.5, limit=100)
    assert proc.returncode is not None  # killed and reaped, not left running


async def test_a_local_session_that_exits_says_how(local: LocalTransport) -> None:
    target = HostTarget("local", "127.0.0.1")
    script = "import sys\nsys.stderr.write('no such copy\\n')\nsys.exit(97)\n"
    session = await local.session(target, [sys.executable, "-c", script])
    with pytest.raises(HostUnreachableError, match=r"exit 97\): no such copy"):
        await session.request("x\n", timeout=10, limit=100)
    assert session.ended is not None
    assert session.ended.exit_status == 97


async def test_output_nobody_asked_for_waits_on_the_host(
    ssh: SSHTransport, ssh_server: FakeSSHServer, target: HostTarget
) -> None:
    """The pipe holds a few reads' worth of stdout and pauses the channel past it: a host that writes 8 MB
    between requests is held back by its SSH window, not buffered whole in the daemon."""
    session = await ssh.session(target, LINES)
    assert isinstance(session, LineSession)
    pipe = session.pipe
    assert isinstance(pipe, SSHPipe)
    pipe.write(b"flood 8388608\n")
    await pipe.drain()
    await asyncio.sleep(0.5)
    held = len(pipe.channel.out)
    assert held <= BUFFER_MAX_BYTES + 65536
    assert ssh_server.flooded < 8388608 // 2  # the host waits: its window closed
    got = 0
    while got < 8388608:  # reads resume the channel: the rest arrives
        chunk = await asyncio.wait_for(pipe.read(1 << 16), 5)
        assert chunk
        got += len(chunk)
    assert got == 8388608
    assert ssh_server.flooded == 8388608


async def test_an_ended_command_keeps_the_start_of_its_stderr(ssh: SSHTransport, target: HostTarget) -> None:
    session = await ssh.session(target, LINES)
    with pytest.raises(HostUnreachableError):
        await session.request("shout 1000000\n", timeout=5, limit=100)
    assert session.ended is not None
    assert session.ended.exit_status == 3
    assert 0 < len(session.ended.stderr) <= STDERR_MAX_BYTES
