"""The preflight on simulated Sparks: the image's own parser refuses a misspelled flag before anything stops.

The eugr nightly lane serves; a commit misspells `--enable-prefix-caching`. A build with no flag table of
its own is only warned about by `lanes check`, so before the preflight every rank was stopped, every new
rank exited on vLLM's "unrecognized arguments", and the lane rolled back. Now the image parses the
arguments first (`docker run --rm --network none ... --entrypoint python3 IMAGE -c SCRIPT ARGS` on the
head rank's host), the lane is denied with vLLM's own sentence, and the old ranks keep serving.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reconciler.facts.preflight import PREFLIGHT_MARKER
from reconciler.policy.preflight import RULE
from reconciler.store.preflight import PREFLIGHTS, cached
from tests.support.example import EUGR, PRODUCTION, with_lane
from tests.support.world import World, sim_world

pytestmark = pytest.mark.timeout(90)
MISSPELLED = "--enable-prefix-cachng"
VLLM_SAYS = f"vllm: error: unrecognized arguments: {MISSPELLED}"
NO_TABLE = "0.40.0.dev3+gdeadbeef"
"""A vLLM main build of a series lanes has no flag table for: `lanes check` judges nothing of its flags."""


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    base = f"127.{200 + os.getpid() % 40}.{(os.getpid() // 40) % 250}."
    async with sim_world(tmp_path, base_address=base) as w:
        yield w


def _preflights(world: World, host: str) -> list[list[str]]:
    """The parsing containers the host was asked to run (every command the simulated host saw)."""
    return [
        argv
        for argv in world.fleet.commands_seen(host)
        if argv[:2] == ["docker", "run"] and any(word.startswith(PREFLIGHT_MARKER + "-") for word in argv)
    ]


async def _serving(world: World) -> dict[str, list[tuple[str, str]]]:
    return {h: [(b.name, b.id) for b in world.containers(h) if b.status == "running"] for h in ("dgx5", "dgx6", "dgx7")}


async def test_a_misspelled_flag_on_a_build_without_a_table_is_refused_by_the_image_and_the_old_ranks_serve(
    world: World,
) -> None:
    # The build without a table, in an image whose own parser is vLLM 0.33.0's.
    image = world.fleet.registry.add(
        "eugr/spark-vllm-b12x:nightly-20261201",
        env={"STANDIN_VERSION": NO_TABLE, "STANDIN_PARSER": "vllm-0.33.0"},
    ).pinned
    first = with_lane(world.state, EUGR, image=image, engine_version=NO_TABLE)
    result = await world.cycle(first)
    assert {r.lane: r.result for r in result.results}[EUGR] == "applied"
    assert not [v for v in result.verdict.violations if v.rule == RULE]
    before = await _serving(world)
    assert all(before.values()), before
    world.record_acts()

    lane = first.lanes[EUGR]
    broken = with_lane(first, EUGR, args=[*lane.args, MISSPELLED])
    result = await world.cycle(broken)

    # The policy could not judge this build's flags; the image did.
    flag_findings = [v for v in result.verdict.violations if v.rule == "engine-flags" and v.lane == EUGR]
    assert [v.severity for v in flag_findings] == ["warn"]
    assert "no flag table for vllm 0.40.0.dev3+gdeadbeef" in flag_findings[0].message
    (refusal,) = [v for v in result.verdict.violations if v.rule == RULE]
    assert (refusal.lane, refusal.severity, refusal.host) == (EUGR, "deny", "dgx5")
    assert refusal.message.endswith(f"on dgx5: {VLLM_SAYS}")
    res = {r.lane: r for r in result.results}
    assert res[EUGR].result == "denied"
    assert res[PRODUCTION].result in ("noop", "applied")
    # Nothing of the lane was stopped or started: the same containers serve.
    assert await _serving(world) == before
    stopped = [a for a in world.acts if a.verb in ("stop", "rm") and EUGR in a.name]
    assert stopped == []
    asked = _preflights(world, "dgx5")[-1]
    assert len(_preflights(world, "dgx5")) == 2  # one per argv: the first spec's, then this one
    assert asked[asked.index("--network") + 1] == "none" and "--gpus" not in asked and asked[-1] == MISSPELLED
    assert not any(_preflights(world, h) for h in ("dgx6", "dgx7"))  # one rank host parses
    record = world.store.lane(EUGR)
    assert record is not None and VLLM_SAYS in (record.last_error or "")


async def test_the_verdict_is_kept_per_image_and_argv_and_not_asked_again(world: World) -> None:
    lane = world.state.lanes[EUGR]
    broken = with_lane(world.state, EUGR, args=[*lane.args, MISSPELLED])
    first = await world.cycle(broken)
    assert {r.lane: r.result for r in first.results}[EUGR] == "denied"
    assert len(_preflights(world, "dgx5")) == 1  # the first cycle: the broken spec, never the good one
    assert PREFLIGHTS in world.store.db.table_names()
    again = await world.cycle(broken)
    (refusal,) = [v for v in again.verdict.violations if v.rule == RULE]
    assert "verdict kept from an earlier run" in refusal.message and VLLM_SAYS in refusal.message
    assert len(_preflights(world, "dgx5")) == 1  # the kept verdict answered; no second container
    assert [row["outcome"] for row in world.store.db.table(PREFLIGHTS).rows_where("lane = ?", [EUGR])] == ["refused"]
    # `lanes plan` (no apply) runs no container, but shows the kept refusal.
    planned = await world.cycle(broken, apply=False)
    assert [v.lane for v in planned.verdict.violations if v.rule == RULE] == [EUGR]
    assert len(_preflights(world, "dgx5")) == 1
    assert cached(world.store, "no such key") is None
