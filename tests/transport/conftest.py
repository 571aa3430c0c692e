"""Fixtures: a running fake SSH host and a transport pinned to its key."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reconciler.transport import HostTarget, SSHTransport

from .sshfake import FakeSSHServer


@pytest.fixture
async def ssh_server(tmp_path: Path) -> AsyncIterator[FakeSSHServer]:
    server = FakeSSHServer(workdir=tmp_path)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def target(ssh_server: FakeSSHServer) -> HostTarget:
    return HostTarget(name="dgx1", address="127.0.0.1", port=ssh_server.port, user="lanes")


@pytest.fixture
async def ssh(ssh_server: FakeSSHServer) -> AsyncIterator[SSHTransport]:
    known_hosts = ssh_server.write_known_hosts(ssh_server.known_hosts_line())
    transport = SSHTransport(known_hosts, [ssh_server.client_key_path], connect_timeout=5.0)
    try:
        yield transport
    finally:
        await transport.close()
