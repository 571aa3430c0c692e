"""The probe program installed once per host, and an unchanged host answering with its digest.

Against the simulated Sparks over real SSH: the first probe of a host finds no program installed and
sends it in the same cycle; later probes send only the launcher with the digest of the facts the
control node holds, and an unchanged host answers with that digest and its volatile figures. A fact
that changes (a link down, a driver upgrade) is seen at the next probe; a missing or corrupt copy is
detected and sent again within the cycle.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from reconciler.execute.cycle import targets_for
from reconciler.facts import commands as fc
from reconciler.facts.observed import ObservedFleet
from reconciler.facts.probe_program import PROBE_PROGRAM_SHA256, program_path
from reconciler.observe.probe import ProbeMemory, observe
from reconciler.sim.hostfacts import GIB
from reconciler.spec.load import DesiredState
from reconciler.transport.base import CommandResult, HostTarget, Transport
from tests.support.example import example_state, fast, loaded
from tests.support.sparks import DemoEnv, running_sparks

pytestmark = pytest.mark.timeout(60)

VOLATILE_ANSWER = {"probe_version", "digest", "unchanged", "time", "meminfo", "disk", "disks"}


@dataclass
class Sent:
    argv: list[str]
    input: str | None
    result: CommandResult


@dataclass
class Recording:
    """A transport that keeps every command sent and every answer, per host."""

    inner: Transport
    sent: dict[str, list[Sent]] = field(default_factory=dict)

    async def run(
        self,
        host: HostTarget,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float = 30.0,
        check: bool = True,
    ) -> CommandResult:
        result = await self.inner.run(host, argv, input=input, timeout=timeout, check=check)
        self.sent.setdefault(host.name, []).append(Sent(list(argv), input, result))
        return result

    async def close(self) -> None:
        await self.inner.close()

    def take(self) -> dict[str, list[Sent]]:
        sent, self.sent = self.sent, {}
        return sent


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[DemoEnv]:
    async with running_sparks(loaded(fast(example_state())), tmp_path / "simwork", base_address="127.52.27.") as env:
        yield env


def _targets(env: DemoEnv, desired: DesiredState) -> dict[str, HostTarget]:
    return targets_for(desired, env.runner.settings.overrides)


async def _observe(env: DemoEnv, wire: Recording, memory: ProbeMemory) -> ObservedFleet:
    desired = loaded(fast(example_state())).desired
    return await observe(desired, wire, _targets(env, desired), memory=memory)


def _modes(sent: list[Sent]) -> list[str]:
    return [fc.read_probe_argv(s.argv).mode for s in sent]


async def test_an_unchanged_host_is_not_sent_the_program_and_answers_with_its_digest(env: DemoEnv) -> None:
    wire, memory = Recording(env.transport), ProbeMemory()
    first = await _observe(env, wire, memory)
    hosts = sorted(first.hosts)
    sent = wire.take()
    # First contact: the launcher finds nothing installed, and the program follows in the same cycle.
    assert {h: _modes(sent[h]) for h in hosts} == {h: ["run", "install"] for h in hosts}
    assert all(sent[h][1].input == fc.PROBE_SCRIPT for h in hosts)
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
    assert {h: len(sent[h]) for h in hosts} == dict.fromkeys(hosts, 1)
    for h in hosts:
        (only,) = sent[h]
        request = fc.read_probe_argv(only.argv)
        assert (request.mode, only.input) == ("run", None)
        assert fc.PROBE_SCRIPT not in only.argv
        held_facts = held[h]
        assert held_facts is not None
        assert request.known == held_facts.digest
        answer = json.loads(only.result.stdout)
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
    first = await _observe(env, wire, memory)
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
    answer = json.loads(sent[host][-1].result.stdout)
    assert "unchanged" not in answer  # the whole answer: the digest it held is stale
    assert [json.loads(s.result.stdout).get("unchanged") for h in second.hosts if h != host for s in sent[h]] == [
        True
    ] * (len(second.hosts) - 1)
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
    assert json.loads(wire.take()[host][-1].result.stdout)["unchanged"] is True
    assert third.hosts[host].info == seen


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
async def test_a_missing_or_corrupt_copy_is_sent_again_in_the_same_cycle(env: DemoEnv, damage: str) -> None:
    wire, memory = Recording(env.transport), ProbeMemory()
    first = await _observe(env, wire, memory)
    host = sorted(first.hosts)[0]
    copy = env.fleet.runtime(host).probe_files.path(program_path(example_state().fleet.state_dir_on_host))
    if damage == "missing":
        copy.unlink()
    else:
        copy.write_text(fc.PROBE_SCRIPT.replace("sort_keys=True", "sort_keys=False"))
    wire.take()
    second = await _observe(env, wire, memory)
    sent = wire.take()
    assert _modes(sent[host]) == ["run", "install"]
    assert sent[host][0].result.exit_status == 97
    assert second.hosts[host].reachable
    assert json.loads(sent[host][1].result.stdout)["unchanged"] is True  # the facts themselves did not change
    assert copy.read_text() == fc.PROBE_SCRIPT
    assert all(_modes(sent[h]) == ["run"] for h in second.hosts if h != host)
    assert memory.installs == len(first.hosts) + 1
