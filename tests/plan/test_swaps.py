"""The planner across lanes: a stop and a deploy on the same hosts are one swap, a failed swap is not redone
while its failed lane is held back, and `after:` orders lanes (validated when the state is loaded)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconciler.errors import InputError
from reconciler.plan import Cause, Plan, fingerprint
from reconciler.plan.steps import Swap
from reconciler.policy import evaluate
from reconciler.spec.lane import Lane
from reconciler.spec.load import DesiredState, load_desired
from tests.support.example import EUGR, PRODUCTION, example_policies, example_state, repo_files, with_lane
from tests.support.planfleet import (
    NEW_IMAGE,
    applied_fleet,
    converge,
    empty_fleet,
    lane_of,
    probed,
    run,
    stopped_state,
)

pytestmark = pytest.mark.timeout(30)
NEXT = "dsv41-flash-next-4x-sglang"
PROD_HOSTS = ("dgx1", "dgx2", "dgx3", "dgx4")


def swapped(desired: DesiredState, image: str = NEW_IMAGE) -> DesiredState:
    """The production lane stopped and NEXT (its lane file with another image) running on its four hosts."""
    data = {**desired.lanes[PRODUCTION].model_dump(), "name": NEXT, "image": image}
    stopped = with_lane(desired, PRODUCTION, desired="stopped")
    return replace(stopped, lanes={**stopped.lanes, NEXT: Lane.model_validate(data)})


def next_fingerprint(state: DesiredState) -> str:
    return fingerprint(evaluate(state, example_policies(), host_info=probed(state)).rendered[NEXT])


def test_a_stop_and_a_deploy_on_the_same_hosts_are_one_swap_and_the_stop_keeps_its_env_files() -> None:
    desired = example_state()
    _, applied = converge(desired)
    result = run(swapped(desired), applied)
    env_dir = desired.fleet.state_dir_on_host + "/env"
    # Rank i of the production lane runs on PROD_HOSTS[i]; its env file is named after its container.
    files = tuple((h, f"{env_dir}/lanes-{PRODUCTION}-r{i}.env") for i, h in enumerate(PROD_HOSTS))
    assert result.swaps == (Swap((PRODUCTION,), (NEXT,), PROD_HOSTS, files),)
    stop = lane_of(result, PRODUCTION)
    assert (stop.action, [s.kind for s in stop.steps]) == ("stop", ["lease", "stop"])
    assert lane_of(result, NEXT).action == "deploy"
    assert result.lanes[0].lane == PRODUCTION  # stops first
    # A stop alone is no swap, and removes its env files itself.
    alone = run(with_lane(desired, PRODUCTION, desired="stopped"), applied)
    assert alone.swaps == ()
    assert [s.kind for s in lane_of(alone, PRODUCTION).steps] == ["lease", "stop", "env-files-remove"]


def _held_swap(result: Plan, taker_cause: Cause) -> None:
    prod, nxt = lane_of(result, PRODUCTION), lane_of(result, NEXT)
    assert (nxt.action, nxt.cause) == ("blocked", taker_cause)
    assert (prod.action, prod.cause, prod.steps) == ("blocked", Cause.SWAP_HELD, ())
    assert "keeps serving on dgx1, dgx2, dgx3, dgx4" in prod.reason and NEXT in prod.reason
    assert result.swaps == ()


def test_a_failed_swap_is_not_redone_while_its_failed_lane_is_held_back() -> None:
    desired = example_state()
    _, applied = converge(desired)
    state = swapped(desired)
    fp = next_fingerprint(state)
    undid = frozenset({NEXT})  # the journal says NEXT's failure undid the swap
    _held_swap(run(state, applied, failed={NEXT: fp}, swapped=undid), Cause.CONDEMNED)
    _held_swap(run(state, applied, retry_at={NEXT: (fp, 2000.0)}, clock=1000.0, swapped=undid), Cause.BACKOFF)
    # The retry is due, the lane changed, or `lanes retry` cleared it: the swap runs again.
    assert run(state, applied, retry_at={NEXT: (fp, 2000.0)}, clock=2001.0, swapped=undid).swaps
    changed = swapped(desired, image=NEW_IMAGE.replace("ab", "cd"))
    assert next_fingerprint(changed) != fp
    again = run(changed, applied, failed={NEXT: fp}, swapped=undid)
    assert [(s.giving, s.taking) for s in again.swaps] == [((PRODUCTION,), (NEXT,))]
    assert run(state, applied).swaps


def test_a_held_lane_holds_a_stop_only_on_the_hosts_it_would_take() -> None:
    desired = example_state()
    _, applied = converge(desired)
    state = with_lane(swapped(desired), EUGR, desired="stopped")
    result = run(state, applied, failed={NEXT: next_fingerprint(state)}, swapped=frozenset({NEXT}))
    assert lane_of(result, PRODUCTION).cause == Cause.SWAP_HELD
    eugr = lane_of(result, EUGR)
    assert (eugr.action, [s.kind for s in eugr.steps]) == ("stop", ["lease", "stop", "env-files-remove"])


def test_a_lane_that_failed_its_own_rollout_holds_no_other_lane_on_its_hosts() -> None:
    # NEXT is condemned, but its failure undid no swap (the journal does not say so): the production
    # lane's stop and another lane's start on those hosts go ahead; only NEXT itself is held.
    desired = example_state()
    _, applied = converge(desired)
    state = swapped(desired)
    result = run(state, applied, failed={NEXT: next_fingerprint(state)})
    assert lane_of(result, PRODUCTION).action == "stop"
    assert lane_of(result, NEXT).cause == Cause.CONDEMNED


def test_after_orders_a_lane_behind_the_changing_lanes_it_names() -> None:
    desired = example_state()
    _, applied = converge(desired)
    # By name PRODUCTION ("dsv41-...") plans before EUGR ("eugr-..."); `after:` turns that around.
    both = with_lane(with_lane(desired, EUGR, image=NEW_IMAGE), PRODUCTION, image=NEW_IMAGE, after=[EUGR])
    result = run(both, applied)
    order = [lp.lane for lp in result.lanes if lp.changes]
    assert order == [EUGR, PRODUCTION]
    assert (lane_of(result, PRODUCTION).after, lane_of(result, EUGR).after) == ((EUGR,), ())
    # A lane it names that does not change this cycle is nothing to wait for.
    alone = run(with_lane(desired, PRODUCTION, image=NEW_IMAGE, after=[EUGR]), applied)
    assert lane_of(alone, PRODUCTION).after == ()
    # Without `after:` the order is by name.
    plain = run(with_lane(with_lane(desired, EUGR, image=NEW_IMAGE), PRODUCTION, image=NEW_IMAGE), applied)
    assert [lp.lane for lp in plain.lanes if lp.changes] == [PRODUCTION, EUGR]


def _with_after(files: dict[str, bytes], lane: str, names: list[str]) -> dict[str, bytes]:
    path = f"state/lanes/{lane}.yaml"
    return {**files, path: files[path] + f"after: [{', '.join(names)}]\n".encode()}


@pytest.mark.parametrize(
    ("afters", "lane", "message"),
    [
        ({PRODUCTION: ["no-such-lane"]}, PRODUCTION, "after: 'no-such-lane' is not a lane"),
        ({PRODUCTION: [PRODUCTION]}, PRODUCTION, "is this lane itself"),
        ({PRODUCTION: [EUGR], EUGR: [PRODUCTION]}, PRODUCTION, f"cycle ({PRODUCTION} -> {EUGR} -> {PRODUCTION})"),
    ],
)
def test_after_names_known_lanes_without_cycles(afters: dict[str, list[str]], lane: str, message: str) -> None:
    files = repo_files()
    for name, names in afters.items():
        files = _with_after(files, name, names)
    with pytest.raises(InputError) as caught:
        load_desired(files, "c" * 40)
    assert message in str(caught.value) and caught.value.file == f"state/lanes/{lane}.yaml"
    assert load_desired(_with_after(repo_files(), PRODUCTION, [EUGR]), "c" * 40).lanes[PRODUCTION].after == (EUGR,)


def test_a_lane_stopped_at_this_commit_gives_its_hosts_to_a_lane_not_yet_seen_ready_there() -> None:
    desired = example_state()
    state = swapped(desired)
    # After a restart mid-swap: the production lane stopped, NEXT's ranks run and no gate saw them ready.
    observed = applied_fleet(state, run(state, empty_fleet(state)))
    prod = lane_of(run(desired, empty_fleet(desired)), PRODUCTION).specs  # what it last passed its gate with
    env = tuple((h, spec.env_file) for h, spec in prod if spec.env_file)
    stopped = {PRODUCTION: stopped_state(state.commit, prod)}
    result = run(state, observed, ready={}, lanes=stopped)
    assert (lane_of(result, NEXT).action, lane_of(result, PRODUCTION).action) == ("verify", "noop")
    assert result.swaps == (Swap((PRODUCTION,), (NEXT,), PROD_HOSTS, env),)
    # Not when it was stopped at another commit, nor once NEXT was seen ready (a later repair is no swap).
    earlier = {PRODUCTION: stopped_state("e" * 40, prod)}
    assert run(state, observed, ready={}, lanes=earlier).swaps == ()
    assert run(state, observed, ready={NEXT: next_fingerprint(state)}, lanes=stopped).swaps == ()
