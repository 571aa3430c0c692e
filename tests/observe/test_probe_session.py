"""Each host's long-lived probe session, against the simulated Sparks over real SSH (the hosts count channels
and requests): a no-op probe opens nothing new, and whatever goes wrong with a session (the host dropping the
connection mid-probe, an answer that never comes, an answer over the bound) makes that host unreachable for
that probe, with the reason, and the next probe opens a fresh session."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reconciler.execute.cycle import targets_for
from reconciler.facts import commands as fc
from reconciler.facts import probe_program
from reconciler.facts.commands import PROBE_MARKER
from reconciler.facts.observed import ObservedFleet
from reconciler.observe import probe
from reconciler.observe.probe import ProbeMemory, observe
from tests.observe.recording import Recording, Sent
from tests.support.example import example_state, fast, loaded
from tests.support.sparks import DemoEnv, running_sparks
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[DemoEnv]:
    async with running_sparks(loaded(fast(example_state())), tmp_path / "simwork", base_address="127.52.38.") as env:
        yield env


async def _observe(env: DemoEnv, wire: Recording, memory: ProbeMemory, timeout: float = 30.0) -> ObservedFleet:
    desired = loaded(fast(example_state())).desired
    return await observe(
        desired, wire, targets_for(desired, env.runner.settings.overrides), memory=memory, timeout=timeout
    )


async def _with_sessions(env: DemoEnv) -> tuple[Recording, ProbeMemory, list[str]]:
    """Every host probed twice: the program installed, then each host's session open."""
    wire, memory = Recording(env.transport), ProbeMemory()
    await _observe(env, wire, memory)
    fleet = await _observe(env, wire, memory)
    assert all(h.reachable for h in fleet.hosts.values())
    wire.take()
    return wire, memory, sorted(fleet.hosts)


def _kinds(sent: list[Sent]) -> list[str]:
    return [s.kind for s in sent]


async def test_a_no_op_probe_reuses_the_session(env: DemoEnv) -> None:
    wire, memory, hosts = await _with_sessions(env)
    counted = {h: (env.fleet.host(h).channels, env.fleet.host(h).requests, env.fleet.host(h).handshakes) for h in hosts}
    for _ in range(2):
        again = await _observe(env, wire, memory)
        assert all(again.hosts[h].reachable for h in hosts)
    assert {h: _kinds(s) for h, s in wire.take().items()} == {h: ["request", "request"] for h in hosts}
    # On the hosts: no channel opened, no command run, no connection made; two requests each.
    after = {h: (env.fleet.host(h).channels, env.fleet.host(h).requests, env.fleet.host(h).handshakes) for h in hosts}
    assert after == {h: (c, r + 2, k) for h, (c, r, k) in counted.items()}


async def test_a_dropped_connection_makes_that_probe_unreachable_and_the_next_reopens(env: DemoEnv) -> None:
    wire, memory, hosts = await _with_sessions(env)
    host = env.fleet.host(hosts[0])
    asked = host.requests
    host.runtime.latency[PROBE_MARKER] = 30.0  # the answer is on its way when the host hangs up
    probing = asyncio.create_task(_observe(env, wire, memory))
    await wait_for(lambda: host.requests > asked, 10, "the request on the host")
    for conn in list(host.connections):
        conn.close()
    lost = await probing
    assert not lost.hosts[hosts[0]].reachable
    assert "connection lost" in (lost.hosts[hosts[0]].error or "")
    assert all(lost.hosts[h].reachable for h in hosts[1:])
    assert memory.get(hosts[0]) is None  # forgotten: the next probe asks for everything

    host.runtime.latency.clear()
    channels = host.channels
    wire.take()
    back = await _observe(env, wire, memory)
    assert back.hosts[hosts[0]].reachable
    sent = wire.take()
    assert _kinds(sent[hosts[0]]) == ["open", "request"]
    assert all(_kinds(sent[h]) == ["request"] for h in hosts[1:])
    assert host.channels == channels + 1


async def test_a_hung_answer_times_out_and_closes_the_session(env: DemoEnv) -> None:
    wire, memory, hosts = await _with_sessions(env)
    host = env.fleet.host(hosts[0])
    host.runtime.latency[PROBE_MARKER] = 30.0
    hung = await _observe(env, wire, memory, timeout=0.5)
    assert not hung.hosts[hosts[0]].reachable
    assert "timed out after 0.5s" in (hung.hosts[hosts[0]].error or "")
    assert all(hung.hosts[h].reachable for h in hosts[1:])
    assert wire.sessions[hosts[0]][-1].closed  # never to be asked again
    assert not any(wire.sessions[h][-1].closed for h in hosts[1:])

    host.runtime.latency.clear()
    wire.take()
    back = await _observe(env, wire, memory)
    assert back.hosts[hosts[0]].reachable
    assert _kinds(wire.take()[hosts[0]]) == ["open", "request"]


async def test_an_oversized_answer_is_refused(env: DemoEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    wire, memory, hosts = await _with_sessions(env)
    monkeypatch.setattr(probe, "ANSWER_MAX_BYTES", 64)  # below even an unchanged host's answer
    refused = await _observe(env, wire, memory)
    assert not any(h.reachable for h in refused.hosts.values())
    assert all("answered more than 64 bytes" in (h.error or "") for h in refused.hosts.values())
    monkeypatch.undo()
    wire.take()
    back = await _observe(env, wire, memory)
    assert all(h.reachable for h in back.hosts.values())
    assert {h: _kinds(s) for h, s in wire.take().items()} == {h: ["open", "request"] for h in hosts}


async def test_a_session_running_another_version_of_the_program_is_not_used(
    env: DemoEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    wire, memory, hosts = await _with_sessions(env)
    old = {h: wire.sessions[h][-1] for h in hosts}
    # A new lanes version: another program, hence another hash and another installed copy's name.
    newer = fc.PROBE_SCRIPT + "# a newer lanes\n"
    digest = hashlib.sha256(newer.encode()).hexdigest()
    for module in (probe_program, fc):
        monkeypatch.setattr(module, "PROBE_PROGRAM_SHA256", digest)
    monkeypatch.setattr(probe, "PROBE_SCRIPT", newer)
    upgraded = await _observe(env, wire, memory)
    assert all(h.reachable for h in upgraded.hosts.values())
    sent = wire.take()
    # Each host's old session is closed, never asked; the new copy is installed and its session opens next.
    assert {h: [s.kind for s in sent[h]] for h in hosts} == {h: ["open", "request", "run"] for h in hosts}
    assert all(digest in sent[h][0].argv[-1] for h in hosts)
    assert all(old[h].closed and old[h].answered == 1 for h in hosts)
    again = await _observe(env, wire, memory)
    assert all(h.reachable for h in again.hosts.values())
    assert {h: [s.kind for s in s_] for h, s_ in wire.take().items()} == {h: ["open", "request"] for h in hosts}
