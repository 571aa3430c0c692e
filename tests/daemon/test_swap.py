"""Swaps as one transaction, through the real daemon process on simulated Sparks.

One commit stops the production lane on dgx1-4 and starts another lane on the same four hosts. Before:
when the new lane failed its readiness gate it was rolled back to nothing and the production lane stayed
stopped, so the four hosts served nothing until a person reverted the commit. Now the production lane
comes back on the spec it ran, gated (seen ready), the status and the commit's note say the swap was
rolled back, and later cycles neither stop it again nor retry the failed lane until that lane changes.
A swap whose new lane passes goes through, and the old lane's env files stay until it passed; a swap cut
short by a killed daemon is still undone when, back, the new lane fails its gate.
"""

from __future__ import annotations

import itertools
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from reconciler.source.notes import read_note
from tests.support.example import LANE_DIR, PROD_HOSTS, PRODUCTION, example_state, fast, fast_files, lane_yaml
from tests.support.receivers import Receivers
from tests.support.waiting import wait_for
from tests.support.world import World, control_world

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]
_salt = itertools.count(191)

NEXT = "dsv41-flash-next-4x-sglang"
"""A lane that takes the production lane's four hosts (the same model on another engine build)."""


@pytest.fixture
def receivers() -> Iterator[Receivers]:
    """A local generic JSON webhook receiver (Apprise's json://), as the daemon's settings route to it."""
    r = Receivers("unused")
    yield r
    r.close()


@pytest.fixture
async def world(tmp_path: Path, receivers: Receivers) -> AsyncIterator[World]:
    """The daemon as a process over the example fleet, converged at the first commit, notifying `receivers`."""
    hook = f"""
[notifications]
backoff_s = 0.2
[notifications.receivers.ops]
url = "json://{receivers.hostport}/hook/ops"
"""
    async with control_world(tmp_path, next(_salt)) as w:
        d = w.add_daemon("daemon", owner="lanes-test", log_level="info", extra=hook)
        await d.start()
        await w.deployed(w.heads[0])
        yield w


def ranks(world: World, lane: str) -> list[tuple[str, str, str]]:
    """(host, container, image) of the lane's running containers on the production hosts."""
    return [
        (h, b.name, b.image)
        for h in PROD_HOSTS
        for b in world.containers(h)
        if b.name.startswith(f"lanes-{lane}-") and b.status == "running"
    ]


def env_files(world: World, lane: str) -> list[str]:
    return sorted(p for h in PROD_HOSTS for p in world.fleet.runtime(h).envfiles if f"lanes-{lane}-" in p)


def swap_commit(world: World, image: str, message: str) -> str:
    """The production lane stopped and NEXT (production's lane file with `image`) running on dgx1-4."""
    files = fast_files(**{PRODUCTION: {"desired": "stopped"}})
    files[f"{LANE_DIR}/{NEXT}.yaml"] = lane_yaml(fast(example_state()), PRODUCTION, image=image)
    head = world.repo.commit(files, message)
    world.heads.append(head)
    return head


async def failing_swap(world: World) -> tuple[str, str]:
    """A swap to NEXT on an engine that never gets ready, pushed and waited for until NEXT's readiness wait:
    (the swap commit, NEXT's image)."""
    never = world.fleet.registry.add(
        "aidendle94/sparkrun-sglang-dsv41-gb10:never", env={"STANDIN_NEVER_HEALTHY": "1"}
    ).pinned
    head = swap_commit(world, never, "move dgx1-4 to the next build (which never gets ready)")
    await wait_for(lambda: world.in_step(NEXT, "wait-ready"), 60, "the new lane's readiness wait", 0.05)
    return head, never


async def test_a_swap_whose_new_lane_never_gets_ready_brings_the_old_lane_back(
    world: World, receivers: Receivers
) -> None:
    old = ranks(world, PRODUCTION)
    assert len(old) == 4
    old_ids = {b.name: b.id for h in PROD_HOSTS for b in world.containers(h)}
    head, never = await failing_swap(world)
    assert ranks(world, PRODUCTION) == []  # the giving lane stopped first, as before
    assert [image for _, _, image in ranks(world, NEXT)] == [never] * 4

    def swap_undone() -> bool:
        return "swap rolled back" in str(world.lane_row(PRODUCTION).get("last_error"))

    await wait_for(swap_undone, 90, "the swap rolled back", 0.1)
    # The old lane serves again: its containers run its old spec, and its gate was passed again just now.
    assert ranks(world, PRODUCTION) == old
    new_ids = {b.name: b.id for h in PROD_HOSTS for b in world.containers(h)}
    assert all(new_ids[name] != old_ids[name] for _, name, _ in old)  # started again, not left running
    assert ranks(world, NEXT) == []
    prod = world.lane_row(PRODUCTION)
    assert prod["health"] == "healthy" and prod["desired"] == "stopped"
    assert "serves its previous spec" in str(prod["last_error"]) and "seen ready" in str(prod["last_error"])
    next_row = world.lane_row(NEXT)
    assert next_row["health"] == "failed" and next_row["failed_fingerprint"]
    assert "readiness gate failed" in str(next_row["last_error"]) and "swap rolled back" in str(next_row["last_error"])
    # The restore ran a gate of its own (journaled), and the apply rows say what happened to each lane.
    assert world.rows("select 1 from journal where lane = ? and kind = 'swap-rollback' and state = 'done'", PRODUCTION)
    assert [a["result"] for a in world.applies(PRODUCTION, head)][-1] == "rolled-back"
    assert (await world.lanes_status())[PRODUCTION]["health"] == "healthy"
    assert "swap rolled back" in str((await world.lanes_status())[PRODUCTION]["last_error"])
    await wait_for(
        lambda: f"lanes: rolled back {PRODUCTION}: swap rolled back" in (read_note(world.repo.repo, head) or ""),
        30,
        "the commit's note",
    )

    # A person is told, by the notification of a rolled-back lane, that it was the swap.
    def told() -> bool:
        return any(PRODUCTION in g.text and "swap rolled back" in g.text for g in receivers.of("json"))

    await wait_for(told, 30, "the notification")
    # ... and is not told to retry the lane that serves again: the retry belongs to the lane that failed.
    restored = [g.text for g in receivers.of("json") if f"swap rolled back, {PRODUCTION} serves" in g.text]
    assert restored and all(f"lanes retry {PRODUCTION}`" not in text for text in restored), restored
    # A later cycle neither stops the old lane again nor retries the failed one: both are held.
    # A later cycle, said by its log line: a lane's row is written when its state changes, not at each look.
    cycles = len(world.daemon.events("cycle.done"))
    world.daemon.kick()
    await wait_for(lambda: len(world.daemon.events("cycle.done")) > cycles, 60, "a later cycle")
    await wait_for(lambda: "keeps serving" in str(world.lane_row(PRODUCTION)["last_error"]), 30, "held")
    assert {b.name: b.id for h in PROD_HOSTS for b in world.containers(h) if PRODUCTION in b.name} == {
        name: new_ids[name] for _, name, _ in old
    }
    assert ranks(world, NEXT) == []
    assert world.lane_row(PRODUCTION)["health"] == "healthy"  # the engine was asked again, and answered
    assert len(world.rows("select 1 from applies where lane = ?", NEXT)) == 1  # tried once, not again
    # A new spec of the failed lane runs the swap again, and it goes through.
    fixed = world.image("next-fixed", load_s=0.5)
    again = swap_commit(world, fixed, "the next build, fixed")
    await wait_for(lambda: world.health(NEXT) == ("healthy", again), 90, "the new lane healthy")
    assert ranks(world, PRODUCTION) == []
    assert [image for _, _, image in ranks(world, NEXT)] == [fixed] * 4
    assert await world.daemon.stop(timeout=30) == 0


async def test_a_swap_goes_through_and_the_old_env_files_stay_until_the_new_lane_passed(world: World) -> None:
    before = env_files(world, PRODUCTION)
    assert len(before) == 4
    slow = world.image("next-slow", load_s=3)
    head = swap_commit(world, slow, "move dgx1-4 to the next build")
    await wait_for(lambda: world.in_step(NEXT, "wait-ready"), 60, "the new lane's readiness wait", 0.05)
    assert ranks(world, PRODUCTION) == []
    assert env_files(world, PRODUCTION) == before  # kept: a rollback would start these ranks again
    await wait_for(lambda: world.health(NEXT) == ("healthy", head), 90, "the new lane healthy")
    await wait_for(lambda: env_files(world, PRODUCTION) == [], 30, "the old env files removed")
    assert [image for _, _, image in ranks(world, NEXT)] == [slow] * 4
    assert world.health(PRODUCTION)[0] == "stopped"
    assert "swap rolled back" not in str(world.lane_row(PRODUCTION).get("last_error"))
    assert await world.daemon.stop(timeout=30) == 0


async def test_a_swap_cut_short_by_a_killed_daemon_is_still_undone_when_the_new_lane_fails(world: World) -> None:
    old = ranks(world, PRODUCTION)
    head, _ = await failing_swap(world)
    assert await world.daemon.stop(signal.SIGKILL, timeout=30) == -signal.SIGKILL
    assert ranks(world, PRODUCTION) == [] and len(ranks(world, NEXT)) == 4
    assert len(env_files(world, PRODUCTION)) == 4  # kept for the swap, which is not over
    await world.daemon.start()
    # Back: the new lane's ranks are gated again, fail, and the production lane stopped before the kill returns.
    await wait_for(lambda: "swap rolled back" in str(world.lane_row(PRODUCTION).get("last_error")), 90, "undone")
    assert ranks(world, PRODUCTION) == old
    assert ranks(world, NEXT) == []
    assert world.lane_row(PRODUCTION)["health"] == "healthy"
    assert [a["result"] for a in world.applies(PRODUCTION, head)][-1] == "rolled-back"
    assert await world.daemon.stop(timeout=30) == 0


async def test_a_daemon_killed_while_it_undoes_a_swap_brings_the_old_lane_back_when_it_returns(world: World) -> None:
    old = ranks(world, PRODUCTION)
    head, _ = await failing_swap(world)
    world.slow(PROD_HOSTS, "docker run", 3.0)  # the undo's starts take a while: the kill lands inside it
    await wait_for(lambda: world.in_step(PRODUCTION, "swap-rollback"), 90, "the undo under way", 0.05)
    assert await world.daemon.stop(signal.SIGKILL, timeout=30) == -signal.SIGKILL
    world.fast()
    assert ranks(world, NEXT) == []  # the new lane's own rollback removed its ranks before the undo began
    assert "swap rolled back" not in str(world.lane_row(PRODUCTION).get("last_error"))
    await world.daemon.start()
    # Back: the commit says the production lane is stopped, yet the undo is finished, gated, and both held.
    await wait_for(lambda: "swap rolled back" in str(world.lane_row(PRODUCTION).get("last_error")), 90, "undone")
    assert ranks(world, PRODUCTION) == old
    prod = world.lane_row(PRODUCTION)
    assert prod["health"] == "healthy" and "seen ready" in str(prod["last_error"])
    # The failed lane says its failure undid the swap (written by the resumed undo, in the same cycle).
    await wait_for(lambda: "swap rolled back" in str(world.lane_row(NEXT)["last_error"]), 30, "the taker's error")
    assert [a["result"] for a in world.applies(PRODUCTION, head)][-1] == "rolled-back"
    assert not world.rows("select 1 from meta where key like 'swap-restore:%'")
    cycles = len(world.daemon.events("cycle.done"))
    world.daemon.kick()  # a later cycle neither stops it again nor retries the failed lane
    await wait_for(lambda: len(world.daemon.events("cycle.done")) > cycles, 60, "a later cycle")
    await wait_for(lambda: "keeps serving" in str(world.lane_row(PRODUCTION)["last_error"]), 30, "held")
    assert ranks(world, PRODUCTION) == old and ranks(world, NEXT) == []
    assert await world.daemon.stop(timeout=30) == 0


async def test_a_swap_whose_new_image_cannot_be_pulled_never_stops_the_old_lane(world: World) -> None:
    ids = {b.name: b.id for h in PROD_HOSTS for b in world.containers(h) if PRODUCTION in b.name}
    assert len(ids) == 4
    unreachable = world.image("next-outage", load_s=0.5)
    world.fleet.registry.go_down()
    head = swap_commit(world, unreachable, "move dgx1-4 to the next build (the registry is down)")
    # The taking lane's record is written first, the giving lane's right after it (execute/swap.py): both.
    await wait_for(
        lambda: (
            "the swap did not begin" in str(world.lane_row(NEXT).get("last_error"))
            and "kept serving: the swap to" in str(world.lane_row(PRODUCTION).get("last_error"))
        ),
        60,
        "refused, both lanes saying so",
    )
    # Pulled before anything stopped: the production lane's very containers still run, and it says why.
    assert {b.name: b.id for h in PROD_HOSTS for b in world.containers(h) if PRODUCTION in b.name} == ids
    assert ranks(world, NEXT) == []
    prod = world.lane_row(PRODUCTION)
    assert prod["health"] == "healthy" and "kept serving: the swap to" in str(prod["last_error"])
    assert [a["result"] for a in world.applies(PRODUCTION, head)] == []  # no transaction of its own ran
    assert world.lane_row(NEXT)["retry_at"]  # a registry outage passes: tried again after a backoff
    world.fleet.registry.come_back()
    assert await world.daemon.stop(timeout=30) == 0
