"""`after:` through the real executor on simulated Sparks: a lane waits for the lanes it names to finish.

Without `after:` the two running lanes of the example fleet change concurrently; with the production lane
`after:` the EUGR lane, the production lane's first step starts only once EUGR's last step finished.
"""

from __future__ import annotations

import pytest

from tests.support.example import EUGR, EUGR_REPO, PRODUCTION, with_lane
from tests.support.world import World

pytestmark = pytest.mark.timeout(120)


def _span(world: World, lane: str, commit: str) -> tuple[float, float]:
    """(first step started, last step finished) of the lane's transaction at `commit`."""
    rows = [r for r in world.store.journal(lane) if r["commit"] == commit]
    assert rows and all(r["state"] == "done" for r in rows), rows
    return min(float(r["started"]) for r in rows), max(float(r["finished"]) for r in rows)


async def test_a_lane_after_another_starts_once_the_other_finished(world: World) -> None:
    await world.cycle()
    eugr_next = world.fleet.registry.add(f"{EUGR_REPO}:after", env={"STANDIN_LOAD_S": "1.5"}).pinned
    prod_next = world.image("after", load_s=0.5)
    both = with_lane(with_lane(world.state, EUGR, image=eugr_next), PRODUCTION, image=prod_next)
    ordered = with_lane(both, PRODUCTION, after=[EUGR], commit="a" * 40)
    result = await world.cycle(ordered)
    assert {r.lane: r.result for r in result.results if r.lane in (EUGR, PRODUCTION)} == {
        EUGR: "applied",
        PRODUCTION: "applied",
    }, [r.error for r in result.results]
    _, eugr_done = _span(world, EUGR, "a" * 40)
    prod_start, _ = _span(world, PRODUCTION, "a" * 40)
    assert prod_start >= eugr_done
    # Without `after:` they overlap: production (0.5 s to load) starts while EUGR (1.5 s) still loads.
    eugr_again = world.fleet.registry.add(f"{EUGR_REPO}:again", env={"STANDIN_LOAD_S": "1.5"}).pinned
    prod_again = world.image("again", load_s=0.5)
    plain = with_lane(with_lane(ordered, EUGR, image=eugr_again), PRODUCTION, image=prod_again, after=[])
    result = await world.cycle(with_lane(plain, EUGR, commit="b" * 40))
    assert {r.lane: r.result for r in result.results if r.lane in (EUGR, PRODUCTION)} == {
        EUGR: "applied",
        PRODUCTION: "applied",
    }, [r.error for r in result.results]
    _, eugr_done = _span(world, EUGR, "b" * 40)
    prod_start, _ = _span(world, PRODUCTION, "b" * 40)
    assert prod_start < eugr_done
