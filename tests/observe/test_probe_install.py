"""The probe program installed once per host, and an unchanged host answering with its digest.

Against the simulated Sparks over real SSH: the first probe of a host finds no program installed (its session's
launcher refuses before anything is read) and sends it in the same cycle; from the next probe on, the host's
session answers a request carrying the digest of the facts the control node holds, and an unchanged host
answers with that digest and its volatile figures. A fact that changes (a link down, a driver upgrade) is seen
at the next probe; a missing or corrupt copy is detected when a session opens and sent again within the cycle.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reconciler.execute.cycle import targets_for
from reconciler.facts import commands as fc
from reconciler.facts.observed import ObservedFleet
from reconciler.facts.probe_program import PROBE_PROGRAM_SHA256, program_path
from reconciler.facts.probe_serve import read_request_line
from reconciler.observe.probe import ProbeMemory, observe
from reconciler.sim.hostfacts import GIB
from reconciler.spec.load import DesiredState
from reconciler.transport.base import HostTarget
from tests.observe.recording import Recording, Sent
from tests.support.example import example_state, fast, loaded
from tests.support.sparks import DemoEnv, running_sparks
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(60)

VOLATILE_ANSWER = {"probe_version", "digest", "unchanged", "time", "meminfo", "disk", "disks"}


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[DemoEnv]:
    async with running_sparks(loaded(fast(example_state())), tmp_path / "simwork", base_address="127.52.37.") as env:
        yield env


def _targets(env: DemoEnv, desired: DesiredState) -> dict[str, HostTarget]:
    return targets_for(desired, env.runner.settings.overrides)


async def _observe(env: DemoEnv, wire: Recording, memory: ProbeMemory) -> ObservedFleet:
    desired = loaded(fast(example_state())).desired
    return await observe(desired, wire, _targets(env, desired), memory=memory)


def _steps(sent: list[Sent]) -> list[str]:
    """What went to a host: a session opened, a request on it, or a command with its probe mode."""
    return [f"run {fc.read_probe_argv(s.argv).mode}" if s.kind == "run" else s.kind for s in sent]


def _answer(sent: list[Sent]) -> dict[str, object]:
    """The last answer a host gave (a request's, or an install's)."""
    answered = [s for s in sent if s.kind != "open" and s.stdout]
    parsed: dict[str, object] = json.loads(answered[-1].stdout)
    return parsed


async def test_an_unchanged_host_is_not_sent_the_program_and_answers_with_its_digest(env: DemoEnv) -> None:
    wire, memory = Recording(env.transport), ProbeMemory()
    first = await _observe(env, wire, memory)
    hosts = sorted(first.hosts)
    sent = wire.take()
    # First contact: the session's launcher finds nothing installed, and the program follows in the same cycle.
    assert {h: _steps(sent[h]) for h in hosts} == {h: ["open", "request", "run install"] for h in hosts}
    assert all(sent[h][1].exit_status == 97 for h in hosts)
    assert all(sent[h][2].input == fc.PROBE_SCRIPT for h in hosts)
    assert memory.installs == len(hosts)
    assert all(first.hosts[h].reachable for h in hosts)
    for h in hosts:  # a real file on the simulated host, named by the program's hash
        copy = env.fleet.runtime(h).probe_files.path(program_path(example_state().fleet.state_dir_on_host))
        assert copy.read_text() == fc.PROBE_SCRIPT
        assert PROBE_PROGRAM_SHA256 in copy.name
    held = {h: memory.get(h) for h in hosts}

    env.fleet.runtime(hosts[0]).facts.page_cache += 3 * GIB  # memory moves: a volatile figure
    second = await _observe(env, wire, memory)
    sent = wire.take()
    # The program is there now: each host's session opens and answers the one request.
    assert {h: _steps(sent[h]) for h in hosts} == {h: ["open", "request"] for h in hosts}
    for h in hosts:
        opened, asked = sent[h]
        assert opened.argv == fc.probe_session_argv(program_path(example_state().fleet.state_dir_on_host))
        assert asked.input is not None
        request = read_request_line(asked.input)
        assert fc.PROBE_SCRIPT not in asked.input
        held_facts = held[h]
        assert held_facts is not None
        assert request.known == held_facts.digest
        answer = json.loads(asked.stdout)
        assert set(answer) == VOLATILE_ANSWER
        assert (answer["unchanged"], answer["digest"]) == (True, held_facts.digest)
        assert second.hosts[h].containers == first.hosts[h].containers
        assert second.hosts[h].info is not None
        assert second.hosts[h].info == first.hosts[h].info
    assert memory.installs == len(hosts)
    before, after = first.hosts[hosts[0]].memory, second.hosts[hosts[0]].memory
    assert before is not None
    assert after is not None
    assert after.cached_bytes == before.cached_bytes + 3 * GIB  # read afresh, not taken from the held facts


@pytest.mark.parametrize("change", ["link down", "driver upgrade"])
async def test_a_changed_fact_is_seen_at_the_next_probe(env: DemoEnv, change: str) -> None:
    wire, memory = Recording(env.transport), ProbeMemory()
    await _observe(env, wire, memory)
    first = await _observe(env, wire, memory)  # the sessions are open from here on
    host = sorted(first.hosts)[0]
    info = env.fleet.runtime(host).facts.info
    up = next(name for name, link in info.links.items() if link.operstate == "up" and name != "lo")
    if change == "link down":
        info.links[up].unplug()
    else:
        info.driver = "590.44.01"
    wire.take()
    second = await _observe(env, wire, memory)
    sent = wire.take()
    assert _steps(sent[host]) == ["request"]  # on the open session
    answer = _answer(sent[host])
    assert "unchanged" not in answer  # the whole answer: the digest it held is stale
    assert [_answer(sent[h]).get("unchanged") for h in second.hosts if h != host] == [True] * (len(second.hosts) - 1)
    seen = second.hosts[host].info
    assert seen is not None
    if change == "link down":
        link = seen.link(up)
        assert link is not None
        assert link.operstate == "down"
    else:
        assert seen.driver_version == "590.44.01"
    held = memory.get(host)
    assert held is not None
    assert held.digest == answer["digest"]
    third = await _observe(env, wire, memory)  # and from then on the new facts are the held ones
    assert _answer(wire.take()[host])["unchanged"] is True
    assert third.hosts[host].info == seen


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
async def test_a_missing_or_corrupt_copy_is_sent_again_in_the_same_cycle(env: DemoEnv, damage: str) -> None:
    wire, memory = Recording(env.transport), ProbeMemory()
    await _observe(env, wire, memory)
    first = await _observe(env, wire, memory)  # the sessions are open from here on
    host = sorted(first.hosts)[0]
    copy = env.fleet.runtime(host).probe_files.path(program_path(example_state().fleet.state_dir_on_host))
    if damage == "missing":
        copy.unlink()
    else:
        copy.write_text(fc.PROBE_SCRIPT.replace("sort_keys=True", "sort_keys=False"))
    wire.take()
    # The open session runs the copy its launcher checked when it started: it goes on answering.
    still = await _observe(env, wire, memory)
    assert _steps(wire.take()[host]) == ["request"]
    assert still.hosts[host].reachable
    assert memory.installs == len(first.hosts)

    # The next session to open (here: the host dropped the connection, as a restarted sshd does) finds the copy.
    for conn in list(env.fleet.host(host).connections):
        conn.close()
    await wait_for(lambda: env.transport.connection_count == len(first.hosts) - 1, 10, "the connection's loss seen")
    second = await _observe(env, wire, memory)
    sent = wire.take()
    assert _steps(sent[host]) == ["open", "request", "run install"]
    assert sent[host][1].exit_status == 97
    assert second.hosts[host].reachable
    assert _answer(sent[host])["unchanged"] is True  # the facts themselves did not change
    assert copy.read_text() == fc.PROBE_SCRIPT
    assert all(_steps(sent[h]) == ["request"] for h in second.hosts if h != host)
    assert memory.installs == len(first.hosts) + 1
