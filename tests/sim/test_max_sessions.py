"""sshd's MaxSessions on simulated Sparks, and the SSH transport's bound that keeps lanes under it.

A stock sshd lets one connection hold 10 sessions open at once (sshd_config(5) MaxSessions) and refuses the
next with "open failed" (OpenSSH serverloop.c). lanes keeps one connection per host and, since issue 27, one
session on it for good (the probe's), so its commands on a busy host must stay under the rest: the
simulated host refuses past the limit as sshd does, and the transport runs at most `COMMANDS_PER_HOST` at once.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import asyncssh
import pytest

from reconciler.sim.registry import SimRegistry
from reconciler.sim.sshd import MAX_SESSIONS, SimFleet
from reconciler.transport.base import HostTarget
from reconciler.transport.ssh import COMMANDS_PER_HOST, SSHTransport

pytestmark = pytest.mark.timeout(60)

SLOW = ["docker", "ps", "-q"]
SLOW_S = 0.5


@pytest.fixture
async def fleet(registry: SimRegistry, tmp_path: Path) -> AsyncIterator[SimFleet]:
    async with SimFleet(["spark1"], base_address="127.77.41.", registry=registry, work_dir=tmp_path / "f") as fleet:
        fleet.runtime("spark1").latency["docker ps"] = SLOW_S
        yield fleet


async def test_a_connection_s_session_past_max_sessions_is_refused_as_sshd_refuses_it(fleet: SimFleet) -> None:
    async with asyncssh.connect(**fleet.connect_options("spark1")) as conn:
        held = [await conn.create_process(shlex.join(SLOW)) for _ in range(MAX_SESSIONS)]
        with pytest.raises(asyncssh.ChannelOpenError) as refused:
            await conn.create_process(shlex.join(SLOW))
        assert (refused.value.code, refused.value.reason) == (asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, "open failed")
        done = await asyncio.gather(*(p.wait() for p in held))
        assert [d.exit_status for d in done] == [0] * MAX_SESSIONS
        again = await conn.run(shlex.join(SLOW), check=False)  # one closed: the next opens
        assert again.exit_status == 0
    assert fleet.host("spark1").most_sessions == MAX_SESSIONS


async def test_many_commands_at_once_on_one_host_wait_their_turn_under_max_sessions(fleet: SimFleet) -> None:
    address, port, user = fleet.targets["spark1"]
    target = HostTarget("spark1", address, port, user)
    transport = SSHTransport(fleet.known_hosts_path, [fleet.client_key_path], connect_timeout=5.0)
    try:
        results = await asyncio.gather(*(transport.run(target, SLOW, timeout=30) for _ in range(3 * MAX_SESSIONS)))
    finally:
        await transport.close()
    assert [r.exit_status for r in results] == [0] * (3 * MAX_SESSIONS)
    assert fleet.host("spark1").most_sessions == COMMANDS_PER_HOST < MAX_SESSIONS
