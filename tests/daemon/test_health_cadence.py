"""In-sync lanes' health at a cadence of its own, off the cycle's critical path (issue 27).

Before, every cycle of the daemon asked every in-sync lane's engine its health path and only then started the
commit's changes: a change waited behind every health request (an engine that hung its answer held it for the
request's timeout), and between two resyncs nothing looked. Now the daemon keeps each engine's last answer,
asks again at `[daemon] health_interval_s` in a round of its own, and a cycle asks only an engine it holds no
fresh answer for; changes start before anything is asked.

The daemon is a real process over simulated Sparks; an engine "hangs" by being stopped (SIGSTOP): its socket
still takes the connection, and nothing answers.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.example import EUGR, PRODUCTION
from tests.support.waiting import wait_for
from tests.support.world import World, daemon_world

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
_salt = itertools.count(241)  # a base no other file uses: suites of other worktrees share loopback
EUGR_HEAD = ("dgx5", f"lanes-{EUGR}-r0")


@contextlib.contextmanager
def hung(world: World, host: str, container: str) -> Iterator[None]:
    """The engine of `container` answers nothing (stopped) until the block ends, however the test went."""
    pid = world.fleet.runtime(host).containers[container].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def next_cycle(world: World) -> None:
    """Kick the daemon (SIGHUP: it reloads, then reconciles at once) and wait for the end of the cycle that
    follows the reload, said by its log (an operation that ended just before says `cycle.done` too)."""
    seen = len(world.daemon.events())
    world.daemon.kick()

    def done() -> bool:
        events = [e.get("event") for e in world.daemon.events()[seen:]]
        return "config.reloaded" in events and "cycle.done" in events[events.index("config.reloaded") :]

    await wait_for(done, 60, "the cycle the kick started")


def assess_failures(world: World, lane: str) -> list[int]:
    """Where in the daemon's log a look at `lane`'s engine found it not answering."""
    return [
        i
        for i, e in enumerate(world.daemon.events())
        if e.get("event") == "lane.assess.failed" and e.get("lane") == lane
    ]


async def in_sync_cycle(world: World) -> None:
    """Kick cycles until one finds no operation of the first commit still open (a lane's operation can end a
    little after its record says healthy, more so on a loaded machine): that cycle saw every lane in sync."""
    for _ in range(10):
        await next_cycle(world)
        if not world.daemon.events("cycle.done")[-1].get("in_flight"):
            return
    raise AssertionError("every cycle kicked found an operation still open")


async def test_a_no_op_cycle_asks_no_engine_whose_health_is_fresh(tmp_path: Path) -> None:
    async with daemon_world(tmp_path, next(_salt), log_level="info", health_s=600) as world:
        await in_sync_cycle(world)  # every lane in sync: each engine is asked, and its answer kept
        with hung(world, *EUGR_HEAD):
            await next_cycle(world)
            # Its answer of a moment ago stands: the cycle did not ask (asked, it would have found it hung).
            assert world.health(EUGR)[0] == "healthy"
            assert assess_failures(world, EUGR) == []
        assert world.daemon.events("health.round") == []  # the round (every 600 s) had no part in it
        assert await world.daemon.stop(timeout=30) == 0


async def test_an_engine_that_stops_answering_is_seen_by_the_health_round_and_healthy_again(tmp_path: Path) -> None:
    async with daemon_world(tmp_path, next(_salt), log_level="info", health_s=1) as world:
        await next_cycle(world)  # the lanes in sync are watched from here on
        cycles = len(world.daemon.events("cycle.done"))
        with hung(world, *EUGR_HEAD):
            await wait_for(lambda: world.health(EUGR)[0] == "degraded", 60, "EUGR degraded")
            error = str(world.lane_row(EUGR)["last_error"])
            assert "every rank runs, but the engine does not answer" in error and "/health did not answer" in error
            assert world.health(PRODUCTION)[0] == "healthy"
        await wait_for(lambda: world.health(EUGR)[0] == "healthy", 60, "EUGR healthy again")
        assert world.lane_row(EUGR)["last_error"] is None
        # The resync is minutes away: rounds told the lane's machine what changed (a round logs at info only then).
        assert [e["changed"] for e in world.daemon.events("health.round")], (cycles, world.daemon.events("cycle.done"))
        assert await world.daemon.stop(timeout=30) == 0


async def test_a_change_starts_before_a_hung_engine_is_asked(tmp_path: Path) -> None:
    async with daemon_world(tmp_path, next(_salt), log_level="info", health_s=600) as world:
        assert await world.daemon.stop(timeout=30) == 0
        with hung(world, *EUGR_HEAD):
            await world.docker("dgx2", "rm", "-f", f"lanes-{PRODUCTION}-r1")  # drift: the next cycle repairs it
            # A daemon just started holds no answer: its first cycle asks every in-sync lane's engine at once.
            restart = len(world.daemon.events())
            await world.daemon.start()
            await wait_for(lambda: assess_failures(world, EUGR) != [], 60, "EUGR's engine asked, and hung")

            def started() -> list[int]:
                return [
                    i
                    for i, e in enumerate(world.daemon.events())
                    if i >= restart and e.get("event") == "operation.started" and e.get("lanes") == [PRODUCTION]
                ]

            await wait_for(lambda: started() != [], 60, "the repair started")
            # The repair started before the hung engine's request ended (which waited out its timeout).
            assert started()[0] < assess_failures(world, EUGR)[0]
        await wait_for(lambda: world.health(PRODUCTION)[0] == "healthy", 60, "production repaired")
        assert await world.daemon.stop(timeout=30) == 0
