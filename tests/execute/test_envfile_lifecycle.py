"""Env files live as long as a rank needs them: a stop removes them, a spec without secrets removes the old ones.

Simulated Sparks through the real executor (real SSH, the real commands; the simulated host answers the
env-file command as the script does on a host, see tests/facts/test_envfile_script.py).
"""

from __future__ import annotations

import pytest

from reconciler.plan.planner import env_file_path
from reconciler.plan.steps import RemoveEnvFiles
from reconciler.sim.hostfacts import SimDir
from tests.support.example import PRODUCTION, with_lane
from tests.support.world import World

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]
PROD_HOSTS = ["dgx1", "dgx2", "dgx3", "dgx4"]


def prod_env_files(world: World) -> dict[str, list[str]]:
    return {h: sorted(p for p in world.fleet.runtime(h).envfiles if PRODUCTION in p) for h in PROD_HOSTS}


async def test_a_stopped_lane_leaves_no_env_file(world: World) -> None:
    await world.cycle()
    written = prod_env_files(world)
    assert all(len(paths) == 1 for paths in written.values()), written
    # The planner's path for a rank's file is the one the renderer gave it (checked, not assumed).
    assert written["dgx1"] == [env_file_path(world.state.fleet.state_dir_on_host, f"lanes-{PRODUCTION}-r0")]
    assert world.fleet.runtime("dgx1").envfiles[written["dgx1"][0]].mode == 0o600

    result = await world.cycle(with_lane(world.state, PRODUCTION, desired="stopped"))
    assert {r.lane: r.result for r in result.results}[PRODUCTION] == "stopped"
    lp = result.plan.lane(PRODUCTION)
    assert lp is not None and any(isinstance(s, RemoveEnvFiles) for s in lp.steps)
    assert prod_env_files(world) == {h: [] for h in PROD_HOSTS}
    assert (await world.cycle()).plan.empty


async def test_a_spec_that_drops_its_secrets_removes_the_old_env_files_once_the_new_ranks_run(world: World) -> None:
    await world.cycle()
    assert all(prod_env_files(world).values())
    result = await world.cycle(with_lane(world.state, PRODUCTION, secrets=[]))
    assert {r.lane: r.result for r in result.results}[PRODUCTION] == "applied"
    lp = result.plan.lane(PRODUCTION)
    assert lp is not None
    kinds = [s.kind for s in lp.steps]
    assert kinds[-2:] == ["wait-ready", "env-files-remove"], kinds
    assert prod_env_files(world) == {h: [] for h in PROD_HOSTS}
    assert (await world.cycle()).plan.empty


async def test_a_removal_the_host_refuses_is_said_and_the_stop_stands(world: World) -> None:
    await world.cycle()
    env_dir = world.state.fleet.state_dir_on_host + "/env"
    world.fleet.runtime("dgx2").facts.dirs[env_dir] = SimDir(ours=False)
    result = await world.cycle(with_lane(world.state, PRODUCTION, desired="stopped"))
    assert {r.lane: r.result for r in result.results}[PRODUCTION] == "stopped"
    left = prod_env_files(world)
    assert left["dgx1"] == [] and len(left["dgx2"]) == 1
    rows = [r for r in world.store.journal(PRODUCTION) if r["kind"] == "env-files-remove"]
    assert rows and "refused" in (rows[0].get("error") or "")
