"""The planner's typed causes: verify, condemned, backoff, drift by kind, and a fault kept to its lane."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconciler.facts.observed import ObservedContainer, ObservedFleet, UnmanagedContainer
from reconciler.plan import planner
from reconciler.plan.steps import Cause, Drift, DriftKind
from tests.support.example import EUGR, PRODUCTION, example_state
from tests.support.planfleet import converge, empty_fleet, run

pytestmark = pytest.mark.timeout(30)


def test_in_sync_without_observed_readiness_is_verified_not_trusted() -> None:
    desired = example_state()
    _first, applied = converge(desired)
    result = run(desired, applied, ready={})
    lp = result.lane(EUGR)
    assert lp is not None and (lp.action, lp.cause) == ("verify", Cause.UNVERIFIED)
    assert [s.kind for s in lp.steps] == ["lease", "wait-ready"]
    assert run(desired, applied).lane(EUGR).action == "noop"  # type: ignore[union-attr]


def test_a_condemned_spec_in_sync_is_held_not_gated_again() -> None:
    desired = example_state()
    first, applied = converge(desired)
    fp = first.lane(EUGR).fingerprint  # type: ignore[union-attr]
    lp = run(desired, applied, ready={}, failed={EUGR: fp}).lane(EUGR)
    assert lp is not None and (lp.action, lp.cause) == ("blocked", Cause.CONDEMNED)


def test_a_spec_in_backoff_waits_until_its_time() -> None:
    desired = example_state()
    first = run(desired, empty_fleet(desired))
    fp = first.lane(EUGR).fingerprint  # type: ignore[union-attr]
    early = run(desired, empty_fleet(desired), retry_at={EUGR: (fp, 2000.0)}, clock=1900.0).lane(EUGR)
    assert early is not None and (early.action, early.cause) == ("blocked", Cause.BACKOFF)
    assert "tried again in 100 s" in early.reason
    due = run(desired, empty_fleet(desired), retry_at={EUGR: (fp, 2000.0)}, clock=2000.0).lane(EUGR)
    assert due is not None and due.action == "deploy"
    other = run(desired, empty_fleet(desired), retry_at={EUGR: ("another", 2000.0)}, clock=0.0).lane(EUGR)
    assert other is not None and other.action == "deploy"  # a backoff belongs to the spec that failed


def _without(fleet: ObservedFleet, hostname: str, name: str) -> ObservedFleet:
    h = fleet.hosts[hostname]
    kept = tuple(c for c in h.containers if c.name != name)
    return ObservedFleet({**fleet.hosts, hostname: replace(h, containers=kept)})


def _with_state(fleet: ObservedFleet, hostname: str, name: str, state: str, code: int) -> ObservedFleet:
    h = fleet.hosts[hostname]
    changed = tuple(replace(c, state=state, exit_code=code) if c.name == name else c for c in h.containers)
    return ObservedFleet({**fleet.hosts, hostname: replace(h, containers=changed)})


def test_a_lane_once_seen_ready_with_every_rank_gone_is_drift_not_a_first_deploy() -> None:
    desired = example_state()
    _, applied = converge(desired)
    gone = applied
    for host, c in [(h, c) for h, obs in applied.hosts.items() for c in obs.containers if f"-{EUGR}-" in c.name]:
        gone = _without(gone, host, c.name)
    lp = run(desired, gone).lane(EUGR)  # its record keeps the fingerprint a gate saw ready
    assert lp is not None and (lp.action, lp.cause) == ("deploy", Cause.DRIFT)
    assert {d.kind for d in lp.drift} == {DriftKind.MISSING} and len(lp.drift) == len(lp.specs) > 1
    assert f"lanes-{EUGR}-r0 missing on" in lp.reason
    never = run(desired, gone, ready={}).lane(EUGR)  # no gate ever saw it: the first deploy it is
    assert never is not None and (never.cause, never.reason) == (Cause.FIRST_DEPLOY, "not running: first deploy")


def test_drift_is_named_by_kind_host_and_container() -> None:
    desired = example_state()
    _, applied = converge(desired)
    r2 = f"lanes-{EUGR}-r2"
    lp = run(desired, _without(applied, "dgx7", r2)).lane(EUGR)
    assert lp is not None and lp.cause == Cause.DRIFT
    assert lp.drift == (Drift(DriftKind.MISSING, "dgx7", r2),)
    assert lp.reason == f"{r2} missing on dgx7"
    stop = next(s for s in lp.steps if s.kind == "stop")
    assert stop.reason == f"redeployed: {r2} missing on dgx7"  # type: ignore[union-attr]

    lp = run(desired, _with_state(applied, "dgx6", f"lanes-{EUGR}-r1", "exited", 137)).lane(EUGR)
    exited = Drift(DriftKind.STOPPED, "dgx6", f"lanes-{EUGR}-r1", "exited, exit code 137")
    assert lp is not None and lp.drift == (exited,)


def test_a_squatter_and_an_unwanted_rank_are_drift_too() -> None:
    desired = example_state()
    _, applied = converge(desired)
    squat = UnmanagedContainer("someones-test", "vllm/vllm-openai:latest", "running")
    dgx1 = applied.hosts["dgx1"]
    extra = ObservedContainer(
        f"lanes-{PRODUCTION}-r9", "id-x", "img", "sha256:x", "running", 0,
        {"lanes.managed": "true", "lanes.lane": PRODUCTION, "lanes.rank": "9", "lanes.spec": "x"},
    )  # fmt: skip
    fleet = ObservedFleet(
        {**applied.hosts, "dgx1": replace(dgx1, unmanaged=(squat,), containers=(*dgx1.containers, extra))}
    )
    lp = run(desired, fleet).lane(PRODUCTION)
    assert lp is not None and lp.cause == Cause.DRIFT
    assert {d.kind for d in lp.drift} == {DriftKind.UNWANTED}
    port_only = ObservedFleet({**applied.hosts, "dgx1": replace(dgx1, unmanaged=(squat,))})
    assert run(desired, port_only).lane(PRODUCTION).action == "noop"  # type: ignore[union-attr]  # lanes' own rank holds the port


def test_a_fault_while_planning_one_lane_holds_that_lane_only(monkeypatch: pytest.MonkeyPatch) -> None:
    desired = example_state()
    real = planner._plan_lane

    def broken(name: str, *args: object) -> object:
        if name == EUGR:
            raise KeyError("a planner bug")
        return real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(planner, "_plan_lane", broken)
    result = run(desired, empty_fleet(desired))
    eugr = result.lane(EUGR)
    assert eugr is not None and (eugr.action, eugr.cause) == ("blocked", Cause.INTERNAL_ERROR)
    assert "KeyError" in eugr.reason and not eugr.steps
    assert result.lane(PRODUCTION).action == "deploy"  # type: ignore[union-attr]


def test_the_spec_changing_is_not_called_drift() -> None:
    desired = example_state()
    _, applied = converge(desired)
    bumped_image = "aidendle94/sparkrun-sglang-dsv41-gb10@sha256:" + "cd" * 32
    from tests.support.example import with_lane

    lp = run(with_lane(desired, PRODUCTION, image=bumped_image), applied).lane(PRODUCTION)
    assert lp is not None and lp.cause == Cause.SPEC_CHANGED
    assert {d.kind for d in lp.drift} == {DriftKind.OTHER_IMAGE} and len(lp.drift) == 4
    assert "(and 3 more rank(s))" in lp.reason
    assert next(s for s in lp.steps if s.kind == "stop").reason == "replaced by the new spec"  # type: ignore[union-attr]
