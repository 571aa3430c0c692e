"""A pooled connection sheds what its handshake left (`transport/sshlean.py`) and still works, a rekey too.

The attributes read here are asyncssh's own: if a release renames them, these tests fail, where the shedding
would silently stop (and the daemon's memory at 1,000 hosts grow back by some 4 MB).
"""

from __future__ import annotations

import gc
import inspect
import re
import shlex
from collections.abc import AsyncIterator
from typing import Any

import asyncssh
import pytest

from reconciler.errors import PermanentError
from reconciler.transport import HostTarget, SSHTransport, sshlean, sshpipe
from reconciler.transport.sshlean import share_options, shared_line, shed_handshake_state

from .sshfake import FakeSSHServer

pytestmark = pytest.mark.timeout(30)


def _conn(transport: SSHTransport) -> Any:
    (conn,) = transport._conns.values()
    return conn


async def test_an_open_connection_holds_no_kexinit_payloads(ssh: SSHTransport, target: HostTarget) -> None:
    assert (await ssh.run(target, ["echo", "hi"])).stdout == "hi\n"
    conn = _conn(ssh)
    assert conn._client_kexinit == b"" and conn._server_kexinit == b""
    assert b"ssh-ed25519" in conn._server_sig_algs  # the server's list is kept, as one shared set


@pytest.fixture
async def other(ssh: SSHTransport, ssh_server: FakeSSHServer, target: HostTarget) -> AsyncIterator[SSHTransport]:
    """A second transport to the same host, each with a connection open: two connections made alike."""
    second = SSHTransport(ssh._known_hosts, [ssh_server.client_key_path], connect_timeout=5.0)
    try:
        await ssh.run(target, ["echo", "a"])
        await second.run(target, ["echo", "b"])
        yield second
    finally:
        await second.close()


async def test_connections_to_hosts_with_one_list_share_its_set(ssh: SSHTransport, other: SSHTransport) -> None:
    assert _conn(ssh) is not _conn(other)
    assert _conn(ssh)._server_sig_algs is _conn(other)._server_sig_algs


async def test_connections_made_alike_share_one_options_object(
    ssh: SSHTransport, other: SSHTransport, target: HostTarget
) -> None:
    a, b = _conn(ssh), _conn(other)
    assert a._options is b._options
    assert all(getattr(a, name) is getattr(b, name) for name in sshlean._ALGS)
    assert a._revoked_host_keys is b._revoked_host_keys == frozenset()
    assert a._trusted_host_keys is not b._trusted_host_keys and a._trusted_host_keys  # the pinned key, each its own
    # The shared object outlives its connection: it keeps no credential (a rotated key must not stay in memory).
    assert a._options.client_keys is None and a._options.kwargs == {}
    assert all(getattr(a._options, name, None) is None for name in sshlean._CREDENTIALS)
    # A session opened after the sharing takes its defaults from the shared options.
    assert (await other.run(target, ["echo", "c"], input="in\n")).stdout == "c\n"
    assert (await ssh.run(target, ["cat"], input="d\n")).stdout == "d\n"


def test_the_session_defaults_are_all_that_create_session_reads_of_the_options() -> None:
    """If an asyncssh release reads another option when it opens a session, the shared object (another
    connection's options) could answer for this one: this fails first."""
    source = inspect.getsource(asyncssh.SSHClientConnection.create_session)
    assert set(re.findall(r"self\._options\.(\w+)", source)) == set(sshlean._SESSION_DEFAULTS)


async def test_options_are_not_shared_before_authentication(ssh: SSHTransport, target: HostTarget) -> None:
    await ssh.run(target, ["echo", "a"])
    conn = _conn(ssh)
    conn._auth_complete = False
    try:
        assert not share_options(conn)
    finally:
        conn._auth_complete = True


async def test_a_rekey_after_shedding_works(ssh: SSHTransport, target: HostTarget) -> None:
    await ssh.run(target, ["echo", "before"])
    conn = _conn(ssh)
    assert conn._client_kexinit == b""
    # asyncssh rekeys once `rekey_bytes` were sent (1 GB by default): the next packet starts an exchange, which
    # hashes both payloads; had either stayed empty, the two sides' keys would disagree and the commands fail.
    conn._rekey_bytes = 1
    assert (await ssh.run(target, ["echo", "during"])).stdout == "during\n"
    conn._rekey_bytes = 1 << 40
    assert (await ssh.run(target, ["echo", "after"])).stdout == "after\n"
    assert conn._kex_complete and conn._kex is None
    assert conn._client_kexinit != b"" and conn._server_kexinit != b""  # the rekey's own, fresh
    assert shed_handshake_state(conn)
    assert conn._client_kexinit == b"" and conn._server_kexinit == b""
    assert (await ssh.run(target, ["echo", "again"])).stdout == "again\n"


async def test_a_key_exchange_under_way_is_left_alone(ssh: SSHTransport, target: HostTarget) -> None:
    await ssh.run(target, ["echo", "before"])
    conn = _conn(ssh)
    conn._kexinit_sent = True  # as between sending our KEXINIT and reading the server's
    try:
        assert not shed_handshake_state(conn)
    finally:
        conn._kexinit_sent = False


def test_a_session_command_line_is_one_string() -> None:
    argv = ("python3", "-c", "print('x' * 2000)", "serve")
    assert shared_line(argv) is shared_line(argv[:2] + argv[2:])  # an equal tuple, not the same one
    assert shared_line(argv) == shlex.join(argv)


async def test_a_finished_command_leaves_no_reference_cycle(ssh: SSHTransport, target: HostTarget) -> None:
    """Its channel and callbacks are freed when it returns, not at a full garbage collection (asyncssh's
    process objects formed cycles: at 1,000 hosts about 3 MB waited for one after a first convergence)."""
    await ssh.run(target, ["echo", "warm"])  # the connection, opened
    gc.collect()
    gc.disable()
    try:
        for i in range(20):
            assert (await ssh.run(target, ["echo", str(i)], input="ignored\n")).stdout == f"{i}\n"
        left = [o for o in gc.get_objects() if isinstance(o, asyncssh.SSHClientChannel)]
    finally:
        gc.enable()
    assert left == []


async def test_a_command_that_prints_past_the_bound_is_stopped_and_refused(
    ssh: SSHTransport, target: HostTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a host prints is not trusted to be bounded: past `COMMAND_OUTPUT_MAX_BYTES` the channel closes and
    the command fails, nothing of its output kept; the connection serves the next command."""
    monkeypatch.setattr(sshpipe, "COMMAND_OUTPUT_MAX_BYTES", 1000)
    with pytest.raises(PermanentError, match="echo printed more than"):
        await ssh.run(target, ["echo", "x" * 5000])
    assert (await ssh.run(target, ["echo", "short"])).stdout == "short\n"
