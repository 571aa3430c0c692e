"""Suspend and change windows through the real daemon process on simulated Sparks.

A suspended lane is left as it is while it drifts (a rank removed by hand stays removed) and says so in
`lanes status`, the daemon's /status and the commit's note; lifting the flag repairs it. A change that
restarts the production lane waits outside its change window, with `status` and the note saying until
when, and goes once the window opens: the window clock is the test's, through `LANES_TEST_CLOCK_FILE`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciler.execute.cycle import CLOCK_FILE_ENV
from reconciler.source.notes import read_note
from tests.support.example import EUGR, EUGR_HOSTS, PROD_HOSTS, PRODUCTION
from tests.support.waiting import wait_for
from tests.support.world import World, daemon_world

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
_salt = itertools.count(171)

# policies/windows.yaml's production-nights: 22:00 Berlin on weeknights, three hours. Tuesday 1 Dec 2026
# (a Tuesday: 1 Jan 2026 is a Thursday, 334 days earlier) in CET (UTC+1): it opens at 21:00 UTC.
TUESDAY_NOON = datetime(2026, 12, 1, 12, 0, tzinfo=UTC).timestamp()
OPENS = "2026-12-01T21:00:00Z"
INSIDE = datetime(2026, 12, 1, 21, 0, 30, tzinfo=UTC).timestamp()


def set_clock(path: Path, epoch: float) -> None:
    path.write_text(f"{epoch}\n")


@pytest.fixture
def clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The window clock of every lanes process this test starts (the daemon inherits the environment)."""
    path = tmp_path / "clock"
    set_clock(path, TUESDAY_NOON)
    monkeypatch.setenv(CLOCK_FILE_ENV, str(path))
    return path


@pytest.fixture
async def world(tmp_path: Path, clock: Path) -> AsyncIterator[World]:
    async with daemon_world(tmp_path, next(_salt), connect_timeout_s=None, log_level="info") as w:
        yield w


def ranks(world: World, lane: str, hosts: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(host, container, image) of the lane's running containers on `hosts`."""
    return [
        (h, b.name, b.image)
        for h in hosts
        for b in world.containers(h)
        if b.name.startswith(f"lanes-{lane}-") and b.status == "running"
    ]


async def test_a_suspended_lane_is_left_alone_while_it_drifts_and_repaired_once_lifted(world: World) -> None:
    before = ranks(world, EUGR, EUGR_HOSTS)
    assert len(before) == 3
    suspend = world.commit("eugr: hands off, debugging on dgx7", {EUGR: {"suspended": True}})
    await wait_for(
        lambda: "suspended in its lane file" in str(world.lane_row(EUGR).get("last_error")), 60, "eugr suspended"
    )
    rank = f"lanes-{EUGR}-r2"
    await world.docker("dgx7", "rm", "-f", rank)  # a person at the console
    seen = world.lane_row(EUGR)["updated"]
    world.daemon.kick()  # reconciles at once, as the resync would later

    def looked_again() -> bool:
        row = world.lane_row(EUGR)
        return row["updated"] > seen and f"{rank} missing on dgx7" in str(row["last_error"])

    await wait_for(looked_again, 60, "a cycle that sees the removed rank")
    assert ranks(world, EUGR, EUGR_HOSTS) == [r for r in before if r[0] != "dgx7"]  # nothing repaired
    assert not world.applies(EUGR, suspend)  # no transaction of any kind ran for it
    # Said everywhere: the journal's status, the daemon's /status, the table, the commit's note.
    assert (await world.lanes_status())[EUGR]["suspended"] is True
    status = await world.daemon.status()
    assert {row["name"]: row["suspended"] for row in status["lanes"]}[EUGR] is True
    _, _, table = await world.daemon_status(world.daemon)
    assert "(suspended)" in table
    await wait_for(lambda: f"lanes: suspended {EUGR}" in (read_note(world.repo.repo, suspend) or ""), 30, "the note")
    code, out, err = await world.lanes(
        "history", EUGR, "--json", "--repo", str(world.repo.path), "--db", str(world.daemon.db)
    )
    assert code == 0, err
    [entry] = [e for e in json.loads(out)["lanes"][EUGR] if e["commit"] == suspend]
    assert {v["result"] for v in entry["verdicts"]} == {"suspended"}
    # Lifted: the next cycle repairs the rank.
    lifted = world.commit("eugr: back to lanes", {EUGR: {"suspended": False}})
    await wait_for(lambda: len(ranks(world, EUGR, ("dgx7",))) == 1, 90, "the rank put back")
    await wait_for(lambda: world.health(EUGR) == ("healthy", lifted), 60, "eugr healthy at the head")
    assert (await world.lanes_status())[EUGR]["suspended"] is False
    assert await world.daemon.stop(timeout=30) == 0


async def test_a_restarting_change_waits_for_its_window_and_goes_inside_it(world: World, clock: Path) -> None:
    old = ranks(world, PRODUCTION, PROD_HOSTS)
    new_image = world.image("held", load_s=0.5)
    change = {"image": new_image, "change_window": "production-nights"}
    head = world.commit("production: new engine, in tonight's window", {PRODUCTION: change})
    await wait_for(lambda: world.lane_row(PRODUCTION).get("held_until") is not None, 60, "the change held")
    assert world.lane_row(PRODUCTION)["held_until"] == datetime(2026, 12, 1, 21, 0, tzinfo=UTC).timestamp()
    assert ranks(world, PRODUCTION, PROD_HOSTS) == old  # nothing restarted
    assert not world.applies(PRODUCTION, head)
    assert (await world.lanes_status())[PRODUCTION]["held_until"] == OPENS
    status = await world.daemon.status()
    assert {row["name"]: row["held_until"] for row in status["lanes"]}[PRODUCTION] == OPENS
    await wait_for(
        lambda: f"lanes: held {PRODUCTION} until {OPENS}" in (read_note(world.repo.repo, head) or ""), 30, "the note"
    )
    # The window opens: the same commit goes, without a new push.
    set_clock(clock, INSIDE)
    world.daemon.kick()
    await wait_for(lambda: world.health(PRODUCTION) == ("healthy", head), 90, "production at the head")
    assert [image for _, _, image in ranks(world, PRODUCTION, PROD_HOSTS)] == [new_image] * 4
    assert world.lane_row(PRODUCTION)["held_until"] is None
    assert (await world.lanes_status())[PRODUCTION]["held_until"] is None
    assert await world.daemon.stop(timeout=30) == 0


async def test_a_commit_trailer_lets_a_change_go_outside_its_window(world: World) -> None:
    new_image = world.image("now", load_s=0.5)
    change = {"image": new_image, "change_window": "production-nights"}
    head = world.commit(
        "production: new engine now, the old one leaks\n\nLanes-Change-Window: now\n", {PRODUCTION: change}
    )
    await wait_for(lambda: world.health(PRODUCTION) == ("healthy", head), 90, "production at the head")
    assert [image for _, _, image in ranks(world, PRODUCTION, PROD_HOSTS)] == [new_image] * 4
    assert world.lane_row(PRODUCTION)["held_until"] is None
    assert await world.daemon.stop(timeout=30) == 0
