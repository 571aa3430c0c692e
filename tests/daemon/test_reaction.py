"""A commit's reaction: the hosts of the lanes it changes are probed and acted on first, the rest after.

The daemon (a real `lanes daemon` process) over the simulated example fleet: the production lane's four
Sparks answer their probe slowly, and a commit changes the EUGR lane (three other Sparks). The change starts
on its own hosts before any of the slow hosts' probes has answered, and the full cycle follows (every host
probed, the commit decided for every lane).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from reconciler.facts.commands import LEASE_MARKER, PROBE_MARKER, command_marker
from tests.support.example import EUGR, EUGR_HOSTS, PROD_HOSTS, PRODUCTION
from tests.support.waiting import wait_for
from tests.support.world import World, daemon_world

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]
_salt = itertools.count(141)

SLOW_PROBE_S = 4.0
"""How long the production Sparks take to answer a probe: well inside the daemon's probe timeout (30 s)."""


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with daemon_world(tmp_path, next(_salt), log_level="info") as w:
        yield w


def watch_commands(world: World, seen: list[tuple[float, str, str]]) -> None:
    """Note each probe's answer and each lease command, with the time, on every simulated host."""
    for host in world.fleet.targets:
        runtime = world.fleet.runtime(host)
        inner: Callable[..., Any] = runtime.execute

        async def execute(argv: list[str], stdin: str | None = None, *, _host: str = host, _inner: Any = inner) -> Any:
            marker = command_marker(argv)
            if marker == LEASE_MARKER:
                seen.append((time.monotonic(), _host, "lease"))
            answer = await _inner(argv, stdin)
            if marker == PROBE_MARKER:
                seen.append((time.monotonic(), _host, "probed"))
            return answer

        runtime.execute = execute  # type: ignore[method-assign]


async def test_a_revert_acts_on_its_lanes_hosts_before_the_rest_of_the_fleet_answers(world: World) -> None:
    """A revert: its spec's arguments were judged by its image before (a new spec waits for that preflight,
    minutes on a real Spark, and is started by the cycle after it)."""
    change = world.commit("eugr: 4 sequences", {EUGR: {"max_num_seqs": 4}})
    await wait_for(lambda: world.health(EUGR) == ("healthy", change), 60, "EUGR at the change", 0.1)
    await wait_for(lambda: world.outcome(change) == "applied", 60, "the change's record", 0.1)
    seen: list[tuple[float, str, str]] = []
    watch_commands(world, seen)
    world.slow(PROD_HOSTS, PROBE_MARKER, SLOW_PROBE_S)
    head = world.commit("Revert eugr: 4 sequences")
    await wait_for(lambda: world.health(EUGR) == ("healthy", head), 60, "EUGR at the new commit", 0.1)
    # The full cycle after the reaction decided the commit for every lane (production's in sync).
    await wait_for(lambda: world.outcome(head) == "applied", 60, "the commit's record", 0.1)
    first_lease = min(t for t, host, what in seen if what == "lease" and host in EUGR_HOSTS)
    slow = [t for t, host, what in seen if what == "probed" and host in PROD_HOSTS]
    assert slow, "the full cycle never probed the production Sparks"
    assert first_lease < min(slow), "EUGR's change waited for the slow hosts' probes"
    assert {host for _, host, what in seen if what == "probed"} == {*EUGR_HOSTS, *PROD_HOSTS}
    assert world.health(PRODUCTION)[0] == "healthy"
    reactions = [e for e in world.daemon.events() if e.get("event") == "cycle.reaction"]
    assert [(e["lanes"], e["hosts"], e["commit"]) for e in reactions][-1:] == [([EUGR], len(EUGR_HOSTS), head[:12])]


async def test_a_change_to_most_of_the_fleet_waits_for_every_hosts_probe(world: World) -> None:
    """Production's four Sparks of seven: probing them first would save little, so one full cycle."""
    seen: list[tuple[float, str, str]] = []
    watch_commands(world, seen)
    world.slow(EUGR_HOSTS, PROBE_MARKER, SLOW_PROBE_S)
    env = {**world.state.lanes[PRODUCTION].env, "LANES_TEST_HARMLESS": "1"}
    head = world.commit("production: a harmless env change", {PRODUCTION: {"env": env}})
    await wait_for(lambda: world.health(PRODUCTION) == ("healthy", head), 60, "production at the new commit", 0.1)
    first_lease = min(t for t, host, what in seen if what == "lease" and host in PROD_HOSTS)
    slow = [t for t, host, what in seen if what == "probed" and host in EUGR_HOSTS]
    assert slow and max(slow) < first_lease  # planned once every host had answered
    assert not [e for e in world.daemon.events() if e.get("event") == "cycle.reaction"]
