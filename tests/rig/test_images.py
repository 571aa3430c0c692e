"""Image bumps: pulled by digest from the rig's registry; a digest the registry lacks changes nothing."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.rig.fleet import (
    QUAD_HOSTS,
    converged,
    deployed,
    digest_of,
    fleet_view,
    quad_and_solo,
    result_of,
    status_of,
)
from tests.rig.rig import Rig

pytestmark = [pytest.mark.rig, pytest.mark.timeout(300)]


def test_an_image_bump_is_pulled_by_digest_on_every_rank_host(rig: Rig) -> None:
    assert rig.images is not None
    rig.publish(quad_and_solo(rig), "quad on v1")
    deployed(rig)
    v2 = digest_of(rig.images.v2)
    assert v2 != digest_of(rig.images.v1)
    for host in QUAD_HOSTS:
        assert rig.docker(host, "image", "inspect", rig.images.v2, check=False).returncode != 0, "not pulled yet"

    sha = rig.publish(quad_and_solo(rig, image_ref=rig.images.v2), "quad: bump the engine image to v2")
    run = converged(rig)

    assert result_of(run, "quad")["result"] == "applied"
    assert result_of(run, "solo")["result"] == "noop", "solo kept its image"
    view = fleet_view(rig)
    for rank, host in enumerate(QUAD_HOSTS):
        quad = view[host][f"lanes-quad-r{rank}"]
        assert (quad.image_digest, quad.image_name, quad.labels["lanes.commit"]) == (v2, rig.images.v2, sha)
        info = json.loads(rig.docker(host, "image", "inspect", rig.images.v2).stdout)
        assert any(d.endswith("@" + v2) for d in info[0]["RepoDigests"]), info[0]["RepoDigests"]
        # The content is v2's: the file the rig put only in that image, read inside the running container.
        marker = rig.docker(
            host,
            "exec",
            f"lanes-quad-r{rank}",
            "python3",
            "-c",
            "print(open('/etc/lanes-rig-image').read().split()[1])",
        ).stdout.strip()
        assert marker == "v2"
    version = httpx.get(f"http://{rig.hosts['rig1'].address}:8000/version", timeout=5).json()
    assert "rig-v2" in json.dumps(version)


def test_a_digest_missing_from_the_registry_fails_the_lane_and_keeps_the_old_ranks(rig: Rig) -> None:
    assert rig.images is not None
    rig.publish(quad_and_solo(rig), "quad on v1")
    deployed(rig)
    before = fleet_view(rig)
    missing = digest_of(rig.images.missing)
    head = httpx.head(f"http://{rig.images.missing.split('/')[0]}/v2/lanes/standin/manifests/{missing}", timeout=5)
    assert head.status_code == 404

    rig.publish(quad_and_solo(rig, image_ref=rig.images.missing), "quad: bump to a digest nobody pushed")
    run = rig.apply()

    assert run.returncode == 1, run.describe()
    quad = result_of(run, "quad")
    assert quad["result"] == "failed", run.describe()
    assert missing in quad["error"] and "manifest unknown" in quad["error"], quad["error"]
    assert result_of(run, "solo")["result"] == "noop"
    after = fleet_view(rig)
    for host in rig.hosts:
        assert {n: (c.id, c.status, c.image_digest) for n, c in after[host].items()} == {
            n: (c.id, "running", c.image_digest) for n, c in before[host].items()
        }, host
    row = status_of(rig, "quad")
    assert row["health"] in {"healthy", "degraded"}, "the old ranks still serve (not the desired spec)"
    assert missing in row["last_error"]
