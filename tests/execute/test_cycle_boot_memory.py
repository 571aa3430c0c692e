"""The cycle's verdict sizes free memory at boot from its own probe: idle hosts as observed, busy ones by profile."""

from __future__ import annotations

import pytest

from tests.support.example import EUGR, PRODUCTION
from tests.support.world import World

pytestmark = pytest.mark.timeout(120)


async def test_the_verdict_reads_the_probe_before_and_after_lanes_run(world: World) -> None:
    first = await world.cycle(apply=False)  # nothing runs yet: every host's MemAvailable is a boot's view
    for rank in first.verdict.budgets:
        seen = first.observed.host(rank.host)
        assert seen is not None and seen.memory is not None
        assert (rank.boot_free, rank.boot_free_origin) == (seen.memory.available_bytes, "observed")
        assert f"MemAvailable on {rank.host} at " in rank.boot_free_source
    await world.cycle()
    after = await world.cycle(apply=False)  # the lanes run now: their hosts fall back to the profile, saying why
    for rank in after.verdict.budgets:
        if rank.lane in (PRODUCTION, EUGR):
            assert rank.boot_free_origin == "profile"
            assert " runs there" in rank.boot_free_source
