"""Hosts' held facts share their equal values (`ProbeMemory.equal_values`, `reconciler.equalvalues`).

The daemon holds every host's last whole answer, parsed; at 1,000 hosts their repeated strings (names,
states, driver and OS texts) were a new object per host, as `json.loads` makes them. Against the simulated
Sparks over real SSH: two hosts' equal facts are one object, and the table is renewed as answers come.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reconciler.execute.cycle import targets_for
from reconciler.facts.observed import ObservedHost
from reconciler.facts.parse import HeldFacts
from reconciler.observe.probe import ProbeMemory, observe
from tests.support.example import example_state, fast, loaded
from tests.support.sparks import DemoEnv, running_sparks

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[DemoEnv]:
    async with running_sparks(loaded(fast(example_state())), tmp_path / "simwork", base_address="127.52.39.") as env:
        yield env


async def _held(env: DemoEnv, memory: ProbeMemory) -> dict[str, ObservedHost]:
    desired = loaded(fast(example_state())).desired
    await observe(desired, env.transport, targets_for(desired, env.runner.settings.overrides), memory=memory)
    held = {name: memory.get(name) for name in desired.hosts}
    return {name: facts.host for name, facts in held.items() if facts is not None}


async def test_equal_facts_of_two_hosts_are_one_object(env: DemoEnv) -> None:
    hosts = list((await _held(env, ProbeMemory())).values())
    assert len(hosts) >= 2
    a, b = hosts[0].info, hosts[1].info
    assert a is not None and b is not None and a.links and b.links
    assert a.links[0].operstate == b.links[0].operstate
    assert a.links[0].operstate is b.links[0].operstate
    assert a.kernel == b.kernel and a.kernel is b.kernel
    assert a.dgx_release == b.dgx_release


def test_the_table_is_renewed_after_twice_as_many_whole_answers_as_hosts_held() -> None:
    memory = ProbeMemory()
    hosts = [f"h{i}" for i in range(100)]

    def whole(name: str) -> HeldFacts:
        return HeldFacts(f"digest-{name}", ObservedHost.unreachable(name, "-"))

    for name in hosts:
        memory.hold(name, whole(name), ObservedHost.unreachable(name, "-"))
    table = memory.equal_values()
    for name in hosts:  # unchanged answers: the facts held come back, nothing new was decoded
        facts = memory.get(name)
        assert facts is not None
        memory.hold(name, facts, facts.host)
    assert memory.equal_values() is table
    for name in hosts:  # a whole answer from each host: 200 since the table began, twice the hosts held
        memory.hold(name, whole(name), ObservedHost.unreachable(name, "-"))
    assert memory.equal_values() is table  # the first fill shared across all 100 hosts
    memory.hold("h0", whole("h0"), ObservedHost.unreachable("h0", "-"))
    assert memory.equal_values() is not table
