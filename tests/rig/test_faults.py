"""The fault matrix on the rig (issue 8): real sshd, podman, registry and links, each fault then its repair.

Each case asserts the end state twice, under the fault and after it is gone: which containers run on
which host (`docker inspect` over ssh), what `lanes apply` and `lanes status --json` say, what the
journal holds, and that nothing is lost: old ranks serve until new ones replace them, the other lanes
go on, and the lane converges once the fault is repaired. Every case puts the rig back (links up, sshd
as set up with the pinned key, our key accepted, the registry up) in a `finally`, and `Rig.reset`
does it again before the next test.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.rig.fleet import (
    QUAD_HOSTS,
    SOLO_HOST,
    SOLO_PORT,
    applies,
    converged,
    deployed,
    digest_of,
    docker_changes,
    docker_mark,
    fleet_view,
    in_flight,
    lane_row,
    quad_and_solo,
    result_of,
    rows_of,
    running,
    served_models,
    status_of,
    statuses,
    steps,
)
from tests.rig.machine import REGISTRY
from tests.rig.rig import Rig

pytestmark = [pytest.mark.rig, pytest.mark.timeout(180)]

GATE = {
    "port_timeout_s": 30,
    "ready_timeout_s": 10,
    "models_timeout_s": 5,
    "completion_timeout_s": 5,
    "poll_interval_s": 0.25,
}
"""Readiness stages for a spec whose port opens late: long enough for the rank watcher (every 5 s) to see a
rank gone before the port stage gives up."""

EDGE_HOST = "rig1"


def ids(view: dict[str, dict[str, Any]]) -> dict[str, dict[str, tuple[str, str]]]:
    """What must not change when nothing is touched: each container's id and start time, per host."""
    return {host: {name: (c.id, c.started_at) for name, c in cs.items()} for host, cs in view.items()}


def has_image(rig: Rig, ref: str) -> dict[str, bool]:
    """Whether each host holds an image (asked over ssh, all hosts at once)."""
    with ThreadPoolExecutor(len(rig.hosts)) as pool:
        found = pool.map(lambda h: rig.docker(h, "image", "inspect", ref, check=False).returncode == 0, rig.hosts)
        return dict(zip(rig.hosts, found, strict=True))


def no_changes(changes: dict[str, list[list[str]]]) -> bool:
    return all(not argvs for argvs in changes.values())


# -- 1. a host rebooted mid-apply -------------------------------------------------------------------------------


def test_a_host_rebooted_mid_apply_is_rolled_back_everywhere_and_converges_after_retry(rig: Rig) -> None:
    """rig1 (the quad head, and the only host of lane `edge`) reboots while quad waits for its new spec."""
    assert rig.images is not None
    lanes = {**quad_and_solo(rig), "edge": rig.lane("edge", [EDGE_HOST], port=SOLO_PORT)}
    first = rig.publish(lanes, "quad over rig1-4, solo on rig2, edge on rig1")
    deployed(rig)
    before = fleet_view(rig)
    v1_specs = {host: before[host][f"lanes-quad-r{rank}"].spec for rank, host in enumerate(QUAD_HOSTS)}
    solo_before = before[SOLO_HOST]["lanes-solo-r0"]
    bumped = {
        **lanes,
        "quad": rig.lane("quad", QUAD_HOSTS, image_ref=rig.images.v2, env={"STANDIN_PORT_DELAY_S": "2.5"}, health=GATE),
    }
    head = rig.publish(bumped, "quad: v2 (its head reboots during the readiness wait)")
    rebooted: list[float] = []

    def reboot_during_the_gate(line: str) -> None:
        if "quad wait-ready" in line and "…" in line and not rebooted:
            rig.reboot("rig1", down_s=1.0)  # link dark, sshd and every container gone, sshd back, link back
            rebooted.append(time.monotonic())

    try:
        run = rig.apply_watching(reboot_during_the_gate)
    finally:
        rig.set_link("rig1", True)
        rig.restore_sshd("rig1")

    assert len(rebooted) == 1, run.describe()
    assert run.returncode == 1, run.describe()
    quad = result_of(run, "quad")
    assert quad["result"] == "rolled-back", run.describe()
    assert "readiness gate failed" in quad["error"] and "lanes-quad-r0@rig1" in quad["error"], quad["error"]
    assert (result_of(run, "solo")["result"], result_of(run, "edge")["result"]) == ("noop", "noop")
    # Every quad rank is back on the last healthy spec, rig1's too (restored once rig1 answered again);
    # solo on rig2 was never touched; edge died with rig1's reboot and nothing restarted it yet.
    view = fleet_view(rig)
    for rank, host in enumerate(QUAD_HOSTS):
        c = view[host][f"lanes-quad-r{rank}"]
        assert (c.spec, c.status, c.image_digest, c.labels["lanes.commit"]) == (
            v1_specs[host],
            "running",
            digest_of(rig.images.v1),
            first,
        ), host
    assert set(view["rig1"]) == {"lanes-quad-r0"}, view["rig1"]
    solo = view[SOLO_HOST]["lanes-solo-r0"]
    assert (solo.id, solo.started_at, solo.status) == (solo_before.id, solo_before.started_at, "running")
    assert served_models(rig.hosts["rig1"].address, 8000) == ["quad-model"]
    rows = statuses(rig)
    row = rows["quad"]
    assert (row["health"], row["commit"], row["desired_commit"]) == ("degraded", first, head), row
    assert "rolled back" in row["last_error"] and "rig1" in row["last_error"], row
    assert rows["solo"]["health"] == "healthy"
    history = applies(rig, "quad")
    assert [a["result"] for a in history] == ["applied", "rolled-back"], history
    assert set(history[1]["logs"]) == {f"lanes-quad-r{rank}@{host}" for rank, host in enumerate(QUAD_HOSTS)}
    kinds = [kind for kind, _ in steps(rig, "quad", head)]
    assert kinds[:2] == ["lease", "pull"] and kinds[-2:] == ["wait-ready", "rollback"], kinds
    assert dict(steps(rig, "quad", head))["wait-ready"] == "failed"
    assert in_flight(rig) == []

    # rig1 is back: the plan sees edge missing there, and quad's failed spec waits for `lanes retry`.
    plan = rig.plan()
    actions = {lp["name"]: (lp["action"], lp["reason"]) for lp in plan.json()["lanes"]}
    assert plan.json()["unreachable"] == [], plan.describe()
    assert actions["edge"] == ("deploy", "lanes-edge-r0 missing on rig1"), actions  # every rank of it is gone
    assert actions["quad"][0] == "blocked" and "lanes retry quad" in actions["quad"][1], actions
    assert actions["solo"][0] == "noop", actions
    retry = rig.lanes("retry", "quad", "--db", str(rig.db))
    assert retry.returncode == 0 and "cleared" in retry.stdout, retry.describe()

    run = converged(rig)

    assert {r["lane"]: r["result"] for r in run.json()["results"]} == {
        "quad": "applied",
        "edge": "applied",
        "solo": "noop",
    }, run.describe()
    after = fleet_view(rig)
    for rank, host in enumerate(QUAD_HOSTS):
        c = after[host][f"lanes-quad-r{rank}"]
        assert (c.image_digest, c.labels["lanes.commit"], c.status) == (digest_of(rig.images.v2), head, "running")
    edge = after[EDGE_HOST]["lanes-edge-r0"]
    assert (edge.status, edge.labels["lanes.commit"]) == ("running", head)
    assert served_models(rig.hosts[EDGE_HOST].address, SOLO_PORT) == ["edge-model"]
    assert after[SOLO_HOST]["lanes-solo-r0"].id == solo_before.id, "solo was never restarted"
    rows = rows_of(run)
    for lane in ("quad", "edge", "solo"):
        assert (rows[lane]["health"], rows[lane]["last_error"]) == ("healthy", None), rows[lane]
    assert (rows["quad"]["commit"], rows["edge"]["commit"]) == (head, head)
    assert [a["result"] for a in applies(rig, "quad")] == ["applied", "rolled-back", "applied"]
    assert in_flight(rig) == []
    assert [a["result"] for a in applies(rig, "edge")] == ["applied", "applied"]


# -- 2. a link cut and restored between cycles -------------------------------------------------------------------


def test_a_link_cut_between_cycles_blocks_only_the_lanes_on_that_host_and_converges_once_restored(rig: Rig) -> None:
    first = rig.publish(quad_and_solo(rig), "v1 everywhere")
    deployed(rig)
    before = fleet_view(rig)
    changed = {
        "quad": rig.lane("quad", QUAD_HOSTS, env={"RIG_FAULT": "link"}),
        "solo": rig.lane("solo", [SOLO_HOST], port=SOLO_PORT, env={"RIG_FAULT": "link"}),
    }
    head = rig.publish(changed, "both lanes: a new env (rig3's cable is cut)")
    mark = docker_mark(rig)
    rig.cut_link("rig3")
    try:
        run = rig.apply()
        rows = statuses(rig)
        quad_row, solo_row = rows["quad"], rows["solo"]
    finally:
        rig.set_link("rig3", True)

    assert run.returncode == 4, run.describe()  # a blocked lane: exitcodes.BLOCKED (issue 16)
    quad = result_of(run, "quad")
    assert quad["result"] == "blocked", run.describe()
    assert "rig3" in quad["error"] and "unreachable" in quad["error"], quad["error"]
    assert not re.search(r"rig[124]", quad["error"]), quad["error"]
    assert result_of(run, "solo")["result"] == "applied", "a lane on other hosts goes on"
    # Nothing of quad was touched anywhere (its rank on rig3 served on behind the cut); solo was redeployed.
    view = fleet_view(rig)
    quad_ids = {h: {n: v for n, v in cs.items() if n.startswith("lanes-quad")} for h, cs in ids(view).items()}
    assert quad_ids == {h: {n: v for n, v in cs.items() if n.startswith("lanes-quad")} for h, cs in ids(before).items()}
    changes = docker_changes(rig, mark)
    assert changes["rig1"] == changes["rig3"] == changes["rig4"] == [], changes
    solo_changes = [argv for argv in changes[SOLO_HOST] if argv[0] != "pull"]
    assert solo_changes and all("lanes-solo-r0" in argv for argv in solo_changes), changes[SOLO_HOST]
    solo = view[SOLO_HOST]["lanes-solo-r0"]
    assert (solo.labels["lanes.commit"], "RIG_FAULT=link" in solo.env) == (head, True)
    assert (quad_row["health"], quad_row["commit"], quad_row["desired_commit"]) == ("degraded", first, head)
    assert "rig3" in quad_row["last_error"] and "unreachable" in quad_row["last_error"], quad_row
    assert (solo_row["health"], solo_row["commit"], solo_row["last_error"]) == ("healthy", head, None)
    assert steps(rig, "quad", head) == [], "a blocked lane runs no step"
    assert [a["result"] for a in applies(rig, "quad")] == ["applied"]

    # The cable is back: no retry needed (nothing was condemned), the next apply converges.
    assert lane_row(rig, "quad")["failed_fingerprint"] is None
    run = converged(rig)

    assert (result_of(run, "quad")["result"], result_of(run, "solo")["result"]) == ("applied", "noop")
    after = fleet_view(rig)
    for rank, host in enumerate(QUAD_HOSTS):
        c = after[host][f"lanes-quad-r{rank}"]
        assert (c.status, c.labels["lanes.commit"], "RIG_FAULT=link" in c.env) == ("running", head, True), host
    assert after[SOLO_HOST]["lanes-solo-r0"].id == solo.id
    row = rows_of(run)["quad"]
    assert (row["health"], row["commit"], row["last_error"]) == ("healthy", head, None), row
    assert [a["result"] for a in applies(rig, "quad")] == ["applied", "applied"]
    assert in_flight(rig) == []


# -- 3. sshd refusing our key -------------------------------------------------------------------------------------


def logins(rig: Rig, host: str, since: int) -> tuple[int, int, int]:
    """What the host's sshd logged since byte `since`: (connections, keys refused, logins accepted)."""
    text = rig.hosts[host].sshd_log.read_bytes()[since:].decode(errors="replace")

    def count(pattern: str) -> int:
        return len(re.findall(pattern, text, re.M))

    return count(r"^Connection from "), count(r"^Failed publickey for root "), count(r"^Accepted publickey for root ")


def test_sshd_refusing_our_key_is_a_permanent_error_for_that_host_and_converges_once_accepted(rig: Rig) -> None:
    first = rig.publish(quad_and_solo(rig), "v1 everywhere")
    deployed(rig)
    before = fleet_view(rig)
    changed = {
        "quad": rig.lane("quad", QUAD_HOSTS, env={"RIG_FAULT": "key"}),
        "solo": rig.lane("solo", [SOLO_HOST], port=SOLO_PORT, env={"RIG_FAULT": "key"}),
    }
    head = rig.publish(changed, "both lanes: a new env (rig4 refuses our key)")
    rig.refuse_client_key("rig4")
    try:
        # The real ssh client agrees: the host answers and refuses the key.
        refused = rig.ssh("rig4", ["true"], check=False)
        assert refused.returncode == 255 and "Permission denied (publickey)" in refused.stderr, refused.stderr
        calls = rig.docker_calls("rig4")
        log_at = rig.hosts["rig4"].sshd_log.stat().st_size

        run = rig.apply()

        seen = logins(rig, "rig4", log_at)
        quad_row = status_of(rig, "quad")
    finally:
        rig.accept_client_key("rig4")

    assert run.returncode == 4, run.describe()  # a blocked lane: exitcodes.BLOCKED (issue 16)
    quad = result_of(run, "quad")
    assert quad["result"] == "blocked", run.describe()
    error = quad["error"]
    assert "rig4" in error and "refused" in error and "client keys" in error, error
    assert "timed out" not in error and not re.search(r"rig[123]", error), error
    # Permanent: one login per probe (the preview, then the cycle), each offering the key once, and no
    # reconnect as after a dropped connection.
    connections, keys_refused, accepted = seen
    assert 1 <= connections <= 2 and keys_refused == connections and accepted == 0, seen
    assert rig.docker_calls("rig4") == calls, "not one docker command ran on rig4"
    assert result_of(run, "solo")["result"] == "applied", "a lane on other hosts goes on"
    view = fleet_view(rig)
    for rank, host in enumerate(QUAD_HOSTS):
        c = view[host][f"lanes-quad-r{rank}"]
        old = before[host][f"lanes-quad-r{rank}"]
        assert (c.id, c.started_at, c.labels["lanes.commit"]) == (old.id, old.started_at, first), host
    assert view[SOLO_HOST]["lanes-solo-r0"].labels["lanes.commit"] == head
    assert (quad_row["health"], quad_row["commit"], quad_row["desired_commit"]) == ("degraded", first, head)
    assert "rig4" in quad_row["last_error"] and "refused" in quad_row["last_error"], quad_row
    assert steps(rig, "quad", head) == []

    run = converged(rig)

    assert result_of(run, "quad")["result"] == "applied", run.describe()
    after = fleet_view(rig)
    for rank, host in enumerate(QUAD_HOSTS):
        c = after[host][f"lanes-quad-r{rank}"]
        assert (c.status, c.labels["lanes.commit"], "RIG_FAULT=key" in c.env) == ("running", head, True), host
    row = rows_of(run)["quad"]
    assert (row["health"], row["commit"], row["last_error"]) == ("healthy", head, None), row
    assert [a["result"] for a in applies(rig, "quad")] == ["applied", "applied"]
    assert in_flight(rig) == []


# -- 4. the registry down during a pull ----------------------------------------------------------------------------


def test_the_registry_down_during_a_pull_fails_before_any_rank_stops_and_converges_once_up(rig: Rig) -> None:
    assert rig.images is not None and rig.registry is not None
    first = rig.publish(quad_and_solo(rig), "v1 everywhere")
    deployed(rig)
    before = fleet_view(rig)
    assert not any(has_image(rig, rig.images.v2).values()), "v2 is not pulled yet"
    head = rig.publish(quad_and_solo(rig, image_ref=rig.images.v2), "quad: v2 (the registry is down)")
    mark = docker_mark(rig)
    rig.registry.stop()
    try:
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://{REGISTRY}/v2/", timeout=2)

        run = rig.apply()
    finally:
        rig.registry.start()

    assert run.returncode == 1, run.describe()
    quad = result_of(run, "quad")
    assert quad["result"] == "failed", run.describe()
    error = quad["error"]
    assert "docker pull" in error and REGISTRY in error and "connection refused" in error, error
    assert all(host in error for host in QUAD_HOSTS), error
    assert result_of(run, "solo")["result"] == "noop"
    # Failed before any rank stopped: every old rank still runs v1 and serves; v2 is nowhere.
    assert ids(fleet_view(rig)) == ids(before)
    changes = docker_changes(rig, mark)
    tried = {host: {argv[0] for argv in argvs} for host, argvs in changes.items()}
    assert tried == {host: {"pull"} for host in QUAD_HOSTS}, f"each host tried the pull, and nothing else: {changes}"
    for host in QUAD_HOSTS:
        assert served_models(rig.hosts[host].address, 8000) == ["quad-model"]
    assert not any(has_image(rig, rig.images.v2).values()), "v2 is nowhere"
    assert steps(rig, "quad", head) == [("lease", "done"), ("pull", "failed")]
    row = status_of(rig, "quad")
    assert (row["health"], row["commit"], row["desired_commit"]) == ("degraded", first, head), row
    assert "connection refused" in row["last_error"] and REGISTRY in row["last_error"], row
    assert lane_row(rig, "quad")["failed_fingerprint"] is None, "not condemned: the next apply pulls again"

    run = converged(rig)

    assert result_of(run, "quad")["result"] == "applied", run.describe()
    after = fleet_view(rig)
    for rank, host in enumerate(QUAD_HOSTS):
        c = after[host][f"lanes-quad-r{rank}"]
        assert (c.image_digest, c.labels["lanes.commit"], c.status) == (digest_of(rig.images.v2), head, "running")
    assert after[SOLO_HOST]["lanes-solo-r0"].id == before[SOLO_HOST]["lanes-solo-r0"].id
    assert [a["result"] for a in applies(rig, "quad")] == ["applied", "failed", "applied"]
    assert in_flight(rig) == []
    row = rows_of(run)["quad"]
    assert (row["health"], row["commit"], row["last_error"]) == ("healthy", head, None), row


# -- 5. a model path missing on one host -------------------------------------------------------------------------


def test_a_model_path_missing_on_one_host_is_refused_before_any_rank_stops_and_converges_once_made(rig: Rig) -> None:
    first = rig.publish(quad_and_solo(rig), "v1 everywhere")
    deployed(rig)
    before = fleet_view(rig)
    path = str(rig.model_path)
    rig.hide_on("rig3", rig.model_path.parent)  # rig3's disk lacks the model folder; the others have it
    try:
        assert rig.ssh("rig3", ["test", "-e", path], check=False).returncode == 1
        assert rig.ssh("rig1", ["test", "-e", path], check=False).returncode == 0
        head = rig.publish(
            quad_and_solo(rig, quad_env={"RIG_FAULT": "model"}), "quad: a new env (rig3 lacks the model)"
        )
        mark = docker_mark(rig)

        run = rig.apply()

        assert run.returncode == 1, run.describe()
        quad = result_of(run, "quad")
        assert quad["result"] == "failed", run.describe()
        assert "rig3" in quad["error"] and path in quad["error"] and "nothing was stopped" in quad["error"], quad
        assert result_of(run, "solo")["result"] == "noop"
        # Refused at planning: no lease, no pull, no stop; every old rank still runs and serves.
        assert no_changes(docker_changes(rig, mark)), docker_changes(rig, mark)
        assert ids(fleet_view(rig)) == ids(before)
        assert served_models(rig.hosts["rig1"].address, 8000) == ["quad-model"]
        assert steps(rig, "quad", head) == [] and [a["result"] for a in applies(rig, "quad")] == ["applied"]
        row = status_of(rig, "quad")
        assert (row["commit"], row["desired_commit"]) == (first, head), row
        assert row["health"] == "degraded", row  # the old spec still serves: not failed
        assert "rig3" in row["last_error"] and path in row["last_error"], row

        # Someone puts the model on rig3: the next apply deploys, no retry needed.
        rig.ssh(
            "rig3",
            [
                "sh",
                "-c",
                'mkdir -p "$1" && printf %s "$2" > "$1/config.json"',
                "sh",
                path,
                '{"architectures": ["TinyForCausalLM"]}',
            ],
        )
        assert rig.ssh("rig3", ["test", "-e", path], check=False).returncode == 0
        run = converged(rig)

        assert result_of(run, "quad")["result"] == "applied", run.describe()
        after = fleet_view(rig)
        for rank, host in enumerate(QUAD_HOSTS):
            c = after[host][f"lanes-quad-r{rank}"]
            assert (c.status, c.labels["lanes.commit"], "RIG_FAULT=model" in c.env) == ("running", head, True), host
            assert (path, path, False) in c.mounts, c.mounts
        seen = rig.docker(
            "rig3", "exec", "lanes-quad-r2", "python3", "-c", f"import os; print(sorted(os.listdir({path!r})))"
        ).stdout.strip()
        assert seen == "['config.json']", seen
        row = rows_of(run)["quad"]
        assert (row["health"], row["commit"], row["last_error"]) == ("healthy", head, None), row
        assert [a["result"] for a in applies(rig, "quad")] == ["applied", "applied"]
        assert in_flight(rig) == []
    finally:
        rig.restore_sshd("rig3")
    assert running(rig, "rig3")["lanes-quad-r2"].status == "running"
