"""A host whose sshd key changed is refused: nothing runs there, and `lanes status` says why."""

from __future__ import annotations

import pytest

from tests.rig.fleet import deployed, quad_and_solo, result_of, running, status_of
from tests.rig.rig import Rig

pytestmark = [pytest.mark.rig, pytest.mark.timeout(300)]


def test_a_replaced_host_key_is_refused_and_nothing_runs_on_that_host(rig: Rig) -> None:
    assert rig.images is not None
    rig.publish(quad_and_solo(rig), "v1 everywhere")
    deployed(rig)
    rig4_before = {n: (c.id, c.spec, c.started_at) for n, c in running(rig, "rig4").items()}
    rig.replace_host_key("rig4")
    try:
        # The real ssh client agrees: the pinned key no longer matches.
        refused = rig.ssh("rig4", ["true"], check=False)
        assert refused.returncode == 255 and "HOST IDENTIFICATION HAS CHANGED" in refused.stderr, refused.stderr
        calls_before = rig.docker_calls("rig4")
        sha = rig.publish(
            {name: {**body, "image": rig.images.v2} for name, body in quad_and_solo(rig).items()}, "both lanes to v2"
        )

        run = rig.apply()

        assert rig.docker_calls("rig4") == calls_before, "no docker command ran on rig4"
        assert run.returncode == 4, run.describe()  # a blocked lane: exitcodes.BLOCKED (issue 16)
        quad = result_of(run, "quad")
        assert quad["result"] == "blocked", run.describe()
        assert "rig4" in quad["error"] and "host key" in quad["error"] and "changed" in quad["error"], quad
        assert result_of(run, "solo")["result"] == "applied", "lanes on other hosts go on"
        row = status_of(rig, "quad")
        assert "host key" in row["last_error"] and row["commit"] != sha, row
        assert row["health"] in {"degraded", "failed"}, row
        assert "host key" in (rig.plan().json()["lanes"][0]["reason"])
    finally:
        rig.restore_host_key("rig4")
    assert {n: (c.id, c.spec, c.started_at) for n, c in running(rig, "rig4").items()} == rig4_before
