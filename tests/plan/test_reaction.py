"""Which lanes a new commit changes, and which hosts its reaction probes before acting on them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconciler.facts.labels import LABEL_LANE, LABEL_MANAGED, LABEL_RANK, MANAGED_VALUE
from reconciler.facts.observed import ObservedContainer, ObservedFleet, ObservedHost
from reconciler.plan.reaction import changed_lanes, hosts_first, reaction, reaction_hosts, worth_a_reaction
from reconciler.spec.load import PolicySet
from tests.support.example import EUGR, EUGR_HOSTS, PROD_HOSTS, PRODUCTION, example_policies, example_state, with_lane

pytestmark = pytest.mark.timeout(30)

GLM = "glm53-mxfp4-fp8-4x-r39"


@pytest.fixture(scope="module")
def policies() -> PolicySet:
    return example_policies()


def test_an_unchanged_commit_changes_no_lane(policies: PolicySet) -> None:
    state = example_state()
    assert changed_lanes(state, policies, example_state("ab" * 20), policies) == frozenset()


def test_a_lane_file_change_is_that_lane_alone(policies: PolicySet) -> None:
    old = example_state()
    new = with_lane(old, EUGR, max_num_seqs=4)
    assert changed_lanes(old, policies, new, policies) == frozenset({EUGR})


def test_added_and_removed_lanes_are_changed(policies: PolicySet) -> None:
    old = example_state()
    new = replace(old, lanes={n: lane for n, lane in old.lanes.items() if n != EUGR})
    assert changed_lanes(old, policies, new, policies) == frozenset({EUGR})
    assert changed_lanes(new, policies, old, policies) == frozenset({EUGR})


def test_a_model_or_host_definition_changes_the_lanes_that_read_it(policies: PolicySet) -> None:
    old = example_state()
    model = old.lanes[EUGR].model
    others = frozenset(n for n, lane in old.lanes.items() if lane.model == model)
    new_model = old.models[model].model_copy(update={"path": old.models[model].path + "-v2"})
    assert changed_lanes(old, policies, replace(old, models={**old.models, model: new_model}), policies) == others
    host = old.hosts["dgx5"].model_copy(update={"address": "10.0.0.250"})
    on_dgx5 = {n for n, lane in old.lanes.items() if "dgx5" in lane.hosts}
    assert on_dgx5 == frozenset({EUGR})
    assert changed_lanes(old, policies, replace(old, hosts={**old.hosts, "dgx5": host}), policies) == frozenset(on_dgx5)


def test_a_fleet_or_policy_change_is_every_lanes(policies: PolicySet) -> None:
    old = example_state()
    fleet = old.fleet.model_copy(update={"lease_ttl_s": old.fleet.lease_ttl_s + 60})
    assert changed_lanes(old, policies, replace(old, fleet=fleet), policies) is None
    rules = policies.rules.model_copy(update={"rules": dict(list(policies.rules.rules.items())[1:])})
    assert changed_lanes(old, policies, old, replace(policies, rules=rules)) is None


def test_the_hosts_are_the_lanes_in_both_commits_and_where_its_containers_were_seen() -> None:
    old = example_state()
    moved = with_lane(old, EUGR, hosts=["dgx6", "dgx7"], tp=2)
    labels = {LABEL_MANAGED: MANAGED_VALUE, LABEL_LANE: EUGR, LABEL_RANK: "9"}
    straggler = ObservedContainer(f"lanes-{EUGR}-r9", "c1", "img", "sha256:1", "running", None, labels)
    seen = ObservedFleet({"dgx1": replace(ObservedHost.unreachable("dgx1", ""), containers=(straggler,))})
    assert reaction_hosts({EUGR}, old, moved, ObservedFleet()) == set(EUGR_HOSTS)  # dgx5 left: its ranks stop
    assert reaction_hosts({EUGR}, old, moved, seen) == {*EUGR_HOSTS, "dgx1"}
    assert worth_a_reaction(frozenset(EUGR_HOSTS), moved)  # 3 of 7 hosts
    assert not worth_a_reaction(frozenset(PROD_HOSTS), moved)  # 4 of 7: the full cycle at once
    assert not worth_a_reaction(frozenset(), moved)
    assert reaction_hosts({PRODUCTION}, old, old, ObservedFleet()) == set(PROD_HOSTS)


def test_a_reaction_is_its_changed_lanes_and_their_hosts_or_none(policies: PolicySet) -> None:
    old = example_state()
    assert reaction(old, policies, with_lane(old, EUGR, max_num_seqs=4), policies, ObservedFleet()) == (
        frozenset({EUGR}),
        frozenset(EUGR_HOSTS),
    )
    assert reaction(old, policies, with_lane(old, PRODUCTION, max_num_seqs=4), policies, ObservedFleet()) is None
    fleet = old.fleet.model_copy(update={"lease_ttl_s": old.fleet.lease_ttl_s + 60})
    assert reaction(old, policies, replace(old, fleet=fleet), policies, ObservedFleet()) is None
    assert hosts_first(frozenset({EUGR}), old, old, ObservedFleet()) == frozenset(EUGR_HOSTS)
