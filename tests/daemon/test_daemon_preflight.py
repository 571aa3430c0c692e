"""The daemon's preflight: a commit whose flag the lane's image refuses is denied, and the old ranks serve.

The eugr nightly build is judged by vLLM 0.32.0's table standing in for it, which only warns; the
simulated image parses as that build would. Before the preflight the daemon stopped the ranks, every new
rank exited on vLLM's "unrecognized arguments" and the lane rolled back.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.example import EUGR, EUGR_HOSTS
from tests.support.waiting import wait_for
from tests.support.world import World, daemon_world

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
_salt = itertools.count(211)
VLLM_SAYS = "vllm: error: unrecognized arguments: --enable-prefix-cachng"


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with daemon_world(tmp_path, next(_salt)) as w:
        yield w


async def test_the_daemon_denies_what_the_image_refuses_before_stopping_anything(world: World) -> None:
    first = world.heads[0]
    before = {h: [(b.name, b.id, b.status) for b in world.containers(h)] for h in EUGR_HOSTS}
    args = [*world.state.lanes[EUGR].args, "--enable-prefix-cachng"]
    bad = world.commit("eugr: a misspelled flag", {EUGR: {"args": args}})

    def refused() -> bool:
        rows = world.rows("select last_error from lanes where name = ?", EUGR)
        # The lane's row is written as the cycle observes it; the commit's decision once the cycle ends.
        return bool(rows) and VLLM_SAYS in str(rows[0]["last_error"] or "") and world.commit_outcome(bad) != {}

    await wait_for(refused, 90, "EUGR denied in vLLM's words and the commit decided", 0.1)
    assert world.health(EUGR)[1] == first  # what serves is still the first commit's spec
    assert {h: [(b.name, b.id, b.status) for b in world.containers(h)] for h in EUGR_HOSTS} == before
    (row,) = world.rows("select outcome, message, lane from preflights where lane = ? and outcome = 'refused'", EUGR)
    assert row["message"] == VLLM_SAYS
