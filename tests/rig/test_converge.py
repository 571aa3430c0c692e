"""A `git push` to the forge, then `lanes apply`: the rig's hosts run exactly the pushed lanes."""

from __future__ import annotations

import re

import pytest

from tests.rig.fleet import (
    QUAD_HOSTS,
    SOLO_HOST,
    SOLO_PORT,
    converged,
    digest_of,
    fleet_view,
    quad_and_solo,
    result_of,
    served_models,
    status_of,
)
from tests.rig.rig import Rig

pytestmark = [pytest.mark.rig, pytest.mark.timeout(300)]


def test_push_then_apply_converges_the_fleet(rig: Rig) -> None:
    assert rig.images is not None
    sha = rig.publish(quad_and_solo(rig), "quad over rig1-4, solo on rig2")

    run = converged(rig)

    assert run.json()["commit"] == sha
    assert result_of(run, "quad")["result"] == "applied"
    assert result_of(run, "solo")["result"] == "applied"
    view = fleet_view(rig)
    expected = {host: {f"lanes-quad-r{rank}"} for rank, host in enumerate(QUAD_HOSTS)}
    expected[SOLO_HOST].add("lanes-solo-r0")
    assert {host: set(containers) for host, containers in view.items()} == expected
    v1 = digest_of(rig.images.v1)
    assert v1 == rig.registry_digest("v1")
    specs = set()
    for host, containers in view.items():
        for name, c in containers.items():
            lane, rank = re.fullmatch(r"lanes-(\w+)-r(\d)", name).groups()  # type: ignore[union-attr]
            assert c.status == "running", c
            assert c.labels["lanes.managed"] == "true"
            assert c.labels["lanes.lane"] == lane
            assert c.labels["lanes.rank"] == rank
            assert c.labels["lanes.commit"] == sha
            assert re.fullmatch(r"[0-9a-f]{16}", c.spec), c.labels
            assert c.image_digest == v1, (host, name, c.image_digest)
            assert c.image_name == rig.images.v1
            specs.add(c.spec)
    assert len(specs) == 5, "each rank has its own spec (rank, NODE_RANK)"
    # Each host serves on its own address, port 8000 on every host like real Sparks.
    for host in QUAD_HOSTS:
        assert served_models(rig.hosts[host].address, 8000) == ["quad-model"]
    assert served_models(rig.hosts[SOLO_HOST].address, SOLO_PORT) == ["solo-model"]
    for lane in ("quad", "solo"):
        row = status_of(rig, lane)
        assert (row["health"], row["commit"]) == ("healthy", sha), row

    # A commit that changes nothing that runs (only the sha moves) restarts nothing.
    ids = {h: {n: c.id for n, c in cs.items()} for h, cs in view.items()}
    rig.publish(quad_and_solo(rig), "an empty change")
    plan = rig.plan("--exit-code")
    assert plan.returncode == 0, plan.describe()
    assert all(lp["action"] == "noop" for lp in plan.json()["lanes"]), plan.describe()
    assert rig.apply().returncode == 0
    assert {h: {n: c.id for n, c in cs.items()} for h, cs in fleet_view(rig).items()} == ids
