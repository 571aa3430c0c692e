"""Table tests: (desired, observed) -> steps, each with its no-op case."""

from __future__ import annotations

import pytest

from reconciler.facts.observed import (
    Lease,
    ObservedContainer,
    ObservedFleet,
    ObservedHost,
    UnmanagedContainer,
)
from reconciler.plan.steps import AcquireLeases, Cause, PullImages, StartRanks, StopContainers, WaitReady, WriteEnvFiles
from reconciler.spec.load import DesiredState
from tests.support.example import (
    EUGR,
    GLM,
    MINIMAX,
    PRODUCTION,
    example_state,
    with_lane,
    without_lane,
)
from tests.support.planfleet import NEW_IMAGE, applied_fleet, converge, empty_fleet, host, run

__all__ = ["converge", "empty_fleet", "run"]
"""Still imported from here by tests/policy/test_render_rule.py and tests/plan/test_restored_drift.py; they
belong in tests.support.planfleet."""

pytestmark = pytest.mark.timeout(30)


def test_first_deploy_starts_every_running_lane_and_nothing_else() -> None:
    desired = example_state()
    result = run(desired, empty_fleet(desired))
    actions = {lp.lane: lp.action for lp in result.lanes}
    assert actions == {PRODUCTION: "deploy", EUGR: "deploy", GLM: "noop", MINIMAX: "noop"}
    prod = result.lane(PRODUCTION)
    assert prod is not None
    kinds = [s.kind for s in prod.steps]
    assert kinds == ["lease", "pull", "env-files", "gpu-free", "start", "wait-ready"]
    start = next(s for s in prod.steps if isinstance(s, StartRanks))
    assert [h for h, _ in start.ranks] == ["dgx1", "dgx2", "dgx3", "dgx4"]
    wait = prod.steps[-1]
    assert isinstance(wait, WaitReady) and wait.host == "dgx1" and wait.port == 8000
    env_files = next(s for s in prod.steps if isinstance(s, WriteEnvFiles))
    assert all(pairs == (("HF_TOKEN", "hf-token"),) for _, _, pairs in env_files.files)


def test_planning_again_from_the_applied_state_is_empty() -> None:
    desired = example_state()
    _, applied = converge(desired)
    again = run(desired, applied)
    assert again.empty
    assert {lp.action for lp in again.lanes} == {"noop"}


def test_a_new_commit_that_changes_no_lane_is_a_noop() -> None:
    desired = example_state()
    _, applied = converge(desired)
    later = DesiredState(
        commit="f" * 40,
        fleet=desired.fleet,
        hosts=desired.hosts,
        models=desired.models,
        lanes=desired.lanes,
        upstreams=desired.upstreams,
        files=desired.files,
    )
    assert run(later, applied).empty


def test_image_bump_replaces_old_ranks_with_a_new_spec_hash() -> None:
    desired = example_state()
    first, applied = converge(desired)
    bumped = with_lane(desired, PRODUCTION, image=NEW_IMAGE)
    result = run(bumped, applied)
    lp = result.lane(PRODUCTION)
    assert lp is not None and lp.action == "deploy"
    assert lp.cause == Cause.SPEC_CHANGED
    assert "runs another image" in lp.reason and NEW_IMAGE in lp.reason
    stop = next(s for s in lp.steps if isinstance(s, StopContainers))
    assert {(c.host, c.name) for c in stop.containers} == {
        (f"dgx{i}", f"lanes-{PRODUCTION}-r{i - 1}") for i in range(1, 5)
    }
    pull = next(s for s in lp.steps if isinstance(s, PullImages))
    assert {image for _, image in pull.pulls} == {NEW_IMAGE}
    old = first.lane(PRODUCTION)
    assert old is not None
    assert {s.spec_hash for _, s in lp.specs}.isdisjoint({s.spec_hash for _, s in old.specs})
    assert run(bumped, applied_fleet(bumped, result)).empty
    other = result.lane(EUGR)
    assert other is not None and other.action == "noop"


def test_lane_moved_to_other_hosts_stops_old_and_starts_new() -> None:
    desired = example_state()
    _, applied = converge(desired)
    moved = with_lane(desired, EUGR, hosts=["dgx5", "dgx6", "dgx7"][::-1])
    lp = run(moved, applied).lane(EUGR)
    assert lp is not None and lp.action == "deploy"
    leases = next(s for s in lp.steps if isinstance(s, AcquireLeases))
    assert set(leases.hosts) == {"dgx5", "dgx6", "dgx7"}
    start = next(s for s in lp.steps if isinstance(s, StartRanks))
    assert next(h for h, _ in start.ranks) == "dgx7"


def test_stopping_a_lane_removes_its_containers() -> None:
    desired = example_state()
    _, applied = converge(desired)
    stopped = with_lane(desired, EUGR, desired="stopped")
    result = run(stopped, applied)
    lp = result.lane(EUGR)
    assert lp is not None and lp.action == "stop"
    assert result.lanes[0].lane == EUGR  # stops run first
    stop = next(s for s in lp.steps if isinstance(s, StopContainers))
    assert len(stop.containers) == 3


def test_a_lane_removed_from_the_state_is_stopped() -> None:
    desired = example_state()
    _, applied = converge(desired)
    lp = run(without_lane(desired, EUGR), applied).lane(EUGR)
    assert lp is not None and lp.action == "stop" and "removed" in lp.reason


@pytest.mark.parametrize("drift", ["missing", "exited", "changed"])
def test_drift_is_repaired_by_redeploying_the_lane(drift: str) -> None:
    desired = example_state()
    _, applied = converge(desired)
    dgx6 = applied.hosts["dgx6"]
    c = dgx6.containers[0]
    if drift == "missing":
        containers: tuple[ObservedContainer, ...] = ()
    elif drift == "exited":
        containers = (ObservedContainer(c.name, c.id, c.image, c.image_id, "exited", 137, c.labels),)
    else:
        labels = dict(c.labels) | {"lanes.spec": "0" * 16}
        containers = (ObservedContainer(c.name, c.id, c.image, c.image_id, "running", 0, labels),)
    hosts = dict(applied.hosts)
    hosts["dgx6"] = host("dgx6", desired, containers)
    lp = run(desired, ObservedFleet(hosts)).lane(EUGR)
    assert lp is not None and lp.action == "deploy"
    assert any(isinstance(s, StartRanks) for s in lp.steps)


def test_unmanaged_container_on_a_lanes_port_is_stopped() -> None:
    desired = example_state()
    _, applied = converge(desired)
    hosts = dict(applied.hosts)
    squatter = UnmanagedContainer("someones-vllm", "vllm/vllm-openai:latest", "running")
    hosts["dgx5"] = host("dgx5", desired, (), listening=[8000], unmanaged=[squatter])
    lp = run(desired, ObservedFleet(hosts)).lane(EUGR)
    assert lp is not None and lp.action == "deploy"
    stops = [s for s in lp.steps if isinstance(s, StopContainers)]
    assert any(c.name == "someones-vllm" and "unmanaged" in s.reason for s in stops for c in s.containers)
    # No squatter: the no-op case.
    assert run(desired, applied).lane(EUGR).action == "noop"  # type: ignore[union-attr]


def test_a_denied_lane_gets_no_steps_and_keeps_running() -> None:
    desired = example_state()
    _, applied = converge(desired)
    unpinned = with_lane(desired, PRODUCTION, image="aidendle94/sparkrun-sglang-dsv41-gb10:latest")
    lp = run(unpinned, applied).lane(PRODUCTION)
    assert lp is not None and lp.action == "denied" and not lp.steps
    assert "image-digest" in lp.reason


def test_unreachable_host_blocks_only_its_lanes() -> None:
    desired = example_state()
    fleet = empty_fleet(desired, dgx3=ObservedHost.unreachable("dgx3", "connection refused"))
    result = run(desired, fleet)
    assert result.lane(PRODUCTION).action == "blocked"  # type: ignore[union-attr]
    assert "dgx3" in result.lane(PRODUCTION).reason  # type: ignore[union-attr]
    assert result.lane(EUGR).action == "deploy"  # type: ignore[union-attr]


def test_failed_spec_is_not_retried_until_it_changes() -> None:
    desired = example_state()
    first = run(desired, empty_fleet(desired))
    fp = first.lane(EUGR).fingerprint  # type: ignore[union-attr]
    again = run(desired, empty_fleet(desired), failed={EUGR: fp})
    assert again.lane(EUGR).action == "blocked"  # type: ignore[union-attr]
    changed = with_lane(desired, EUGR, max_num_seqs=4)
    assert run(changed, empty_fleet(changed), failed={EUGR: fp}).lane(EUGR).action == "deploy"  # type: ignore[union-attr]


def test_missing_model_fails_the_lane_before_anything_is_stopped() -> None:
    desired = example_state()
    _, applied = converge(desired)
    bumped = with_lane(desired, EUGR, image=NEW_IMAGE.replace("aidendle94/sparkrun-sglang-dsv41-gb10", "eugr/x"))
    hosts = dict(applied.hosts)
    model_path = desired.models[desired.lanes[EUGR].model].path
    hosts["dgx7"] = host("dgx7", desired, applied.hosts["dgx7"].containers, missing_models=[model_path])
    lp = run(bumped, ObservedFleet(hosts)).lane(EUGR)
    assert lp is not None and lp.action == "fail" and not lp.steps
    assert "dgx7" in lp.reason and model_path in lp.reason


def test_a_host_leased_by_another_daemon_blocks_the_lane() -> None:
    desired = example_state()
    leased = host("dgx5", desired, lease=Lease("other-daemon", 900.0, 2000.0))
    lp = run(desired, empty_fleet(desired, dgx5=leased)).lane(EUGR)
    assert lp is not None and lp.action == "blocked" and "other-daemon" in lp.reason
    expired = host("dgx5", desired, lease=Lease("other-daemon", 100.0, 200.0))
    assert run(desired, empty_fleet(desired, dgx5=expired)).lane(EUGR).action == "deploy"  # type: ignore[union-attr]
