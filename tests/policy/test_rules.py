"""One passing and one failing case for each rule other than the memory budget."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pytest

from reconciler.policy import Violation, evaluate
from reconciler.spec.load import DesiredState, PolicySet

from .builders import SHA, gqa, host, lane, mla, model, only_rules, repo_policies, state

pytestmark = pytest.mark.timeout(30)

ALL = repo_policies()


def run(desired: DesiredState, rule: str, policies: PolicySet = ALL) -> list[Violation]:
    return [v for v in evaluate(desired, only_rules(policies, rule)).violations if v.rule == rule]


def two_lanes(util_a: float = 0.4, util_b: float = 0.4, port_b: int = 8001, **b_fields: object) -> DesiredState:
    b_fields.setdefault("served_model_name", "served-b")
    return state(
        [host("h0"), host("h1")],
        [model("m")],
        [
            lane("a", "m", ["h0"], gpu_memory_utilization=util_a, served_model_name="served-a"),
            lane("b", "m", ["h0", "h1"], gpu_memory_utilization=util_b, port=port_b, **b_fields),
        ],
    )


# -- host-sharing ---------------------------------------------------------------------


def test_two_lanes_that_fit_together_share_a_host() -> None:
    # vLLM lanes take their whole budget: ceil(0.40 x 121.7 GiB) twice = 97.4 GiB, under the 101.5 GiB free at
    # boot (the gb10 profile's boot_free, the rule's capacity).
    assert run(two_lanes(0.4, 0.4), "host-sharing") == []


def test_two_lanes_that_do_not_fit_together_are_denied_naming_each_other() -> None:
    found = run(two_lanes(0.5, 0.5), "host-sharing")
    assert {(v.lane, v.host, v.severity) for v in found} == {("a", "h0", "deny"), ("b", "h0", "deny")}
    by_lane = {v.lane: v for v in found}
    assert "running lane b" in by_lane["a"].message
    assert "running lane a" in by_lane["b"].message
    detail = by_lane["a"].detail
    # vLLM's request is math.ceil(total x utilization) (vllm/v1/worker/utils.py request_memory), per lane.
    assert detail["sum_takes"] == 2 * math.ceil(0.5 * int(121.7 * (1 << 30)))
    assert detail["limit"] == int(101.5 * (1 << 30))  # gb10 boot_free: no probe in a unit test
    assert detail["limit_basis"] == "boot_free"
    assert detail["other_lanes"] == "b"


def test_a_stopped_lane_does_not_share() -> None:
    assert run(two_lanes(0.5, 0.5, desired="stopped"), "host-sharing") == []


def test_sharing_capacity_basis_is_a_parameter() -> None:
    from .builders import with_rule

    policies = with_rule(ALL, "host-sharing", params={"capacity": "torch_visible"})
    assert run(two_lanes(0.5, 0.45), "host-sharing", policies) == []
    assert len(run(two_lanes(0.5, 0.55), "host-sharing", policies)) == 2


# -- port-clash -----------------------------------------------------------------------


def test_same_port_on_a_shared_host_is_denied() -> None:
    found = run(two_lanes(port_b=8000), "port-clash")
    assert {(v.lane, v.host) for v in found} == {("a", "h0"), ("b", "h0")}
    assert all("port 8000" in v.message and v.severity == "deny" for v in found)


def test_different_ports_pass() -> None:
    assert run(two_lanes(port_b=8001), "port-clash") == []


def two_multi_node_heads(
    port_a: int, port_b: int, a_fields: Mapping[str, object] | None = None, **b_fields: object
) -> DesiredState:
    return state(
        [host("h0"), host("h1")],
        [model("m")],
        [
            lane("a", "m", ["h0", "h1"], gpu_memory_utilization=0.4, served_model_name="served-a", port=port_a,
                 **(a_fields or {})),
            lane("b", "m", ["h0", "h1"], gpu_memory_utilization=0.4, served_model_name="served-b", port=port_b,
                 **b_fields),
        ],
    )  # fmt: skip


def test_two_multi_node_heads_on_one_host_get_their_own_distributed_ports() -> None:
    desired = two_multi_node_heads(8000, 8001)
    assert run(desired, "port-clash") == []
    verdict = evaluate(desired, only_rules(ALL, "port-clash"))
    assert verdict.ports["a"] == {"api": "8000", "dist": "28000"}
    assert verdict.ports["b"] == {"api": "8001", "dist": "28001"}
    assert verdict.to_json()["ports"] == {"a": {"api": "8000", "dist": "28000"}, "b": {"api": "8001", "dist": "28001"}}


def test_a_lane_whose_api_port_is_anothers_distributed_port_is_denied_naming_both_uses() -> None:
    found = run(two_multi_node_heads(8000, 28000), "port-clash")
    assert {(v.lane, v.host) for v in found} == {("a", "h0"), ("b", "h0")}
    assert all("port 28000" in v.message and "a dist, b api" in v.message for v in found)


def test_ray_lanes_on_one_host_pin_every_ray_port_apart() -> None:
    ray = {"engine": "vllm", "launcher": "ray"}
    # a: Ray 29000-29007, its workers 29100-29199; b: Ray 29200-29207, workers 29300-29399.
    assert run(two_multi_node_heads(8000, 8200, a_fields=ray, **ray), "port-clash") == []
    closer = two_multi_node_heads(8000, 8100, a_fields=ray, **ray)
    assert {v.lane for v in run(closer, "port-clash")} == {"a", "b"}  # b's Ray head sits in a's worker range


# -- name-clash -----------------------------------------------------------------------


def test_names_that_fold_to_one_container_name_clash() -> None:
    desired = state(
        [host("h0"), host("h1")],
        [model("m")],
        [lane("x.y", "m", ["h0"]), lane("x_y", "m", ["h1"], desired="stopped")],
    )
    found = run(desired, "name-clash")
    assert {v.lane for v in found} == {"x.y", "x_y"}
    running = next(v for v in found if v.lane == "x.y")
    assert running.severity == "deny"
    assert running.detail["container_name"] == "x-y"


def test_served_model_name_clash_on_a_shared_host() -> None:
    found = run(two_lanes(served_model_name="served-a"), "name-clash")
    assert {v.lane for v in found} == {"a", "b"}
    assert all("'served-a'" in v.message and v.host == "h0" for v in found)


def test_distinct_names_pass() -> None:
    assert run(two_lanes(), "name-clash") == []


# -- topology -------------------------------------------------------------------------


def topo(**fields: Any) -> list[Violation]:
    hosts = [f"h{i}" for i in range(4)]
    arch = fields.pop("arch", gqa(num_heads=32, kv_heads=8))
    lane_hosts = fields.pop("lane_hosts", hosts)
    desired = state(
        [host(h) for h in hosts],
        [model("m", arch=arch)],
        [lane("l", "m", lane_hosts, **fields)],
    )
    return run(desired, "topology")


def test_valid_topology_passes() -> None:
    assert topo(tp=2, pp=2, ep=4, dcp=2) == []


def test_tp_times_pp_must_equal_hosts() -> None:
    [v] = topo(tp=2, pp=1)
    assert "tp x pp is 2 x 1 = 2 ranks but the lane lists 4 hosts" in v.message
    assert v.detail["ranks"] == 2


def test_unknown_host_is_denied() -> None:
    [v] = topo(lane_hosts=["h0", "nope"], tp=2)
    assert (v.host, v.rank) == ("nope", 1)


def test_unknown_hardware_profile_is_denied() -> None:
    desired = state([host("h0", hardware="gb300")], [model("m")], [lane("l", "m", ["h0"])])
    [v] = run(desired, "topology")
    assert "gb300" in v.message
    assert evaluate(desired, ALL).budgets == ()


def test_ep_must_divide_the_world() -> None:
    [v] = topo(tp=4, ep=3)
    assert "ep 3 must divide" in v.message


def test_dcp_must_divide_tp() -> None:
    [v] = topo(tp=4, dcp=3)
    assert "dcp 3 must divide tp 4" in v.message


def test_heads_must_split_over_tp() -> None:
    found = topo(tp=4, arch=gqa(num_heads=30, kv_heads=6))
    assert len(found) == 2  # 30 query heads and 6 KV heads over tp 4
    assert topo(tp=4, arch=mla(num_heads=64)) == []


# -- image-digest / model-revision ---------------------------------------------------


def test_image_by_tag_is_denied() -> None:
    desired = state([host("h0")], [model("m")], [lane("l", "m", ["h0"], image="lmsysorg/sglang:v0.5.22-cu130")])
    [v] = run(desired, "image-digest")
    assert v.severity == "deny"
    assert "lmsysorg/sglang:v0.5.22-cu130@sha256:" in v.message


def test_image_by_digest_passes() -> None:
    desired = state([host("h0")], [model("m")], [lane("l", "m", ["h0"])])
    assert run(desired, "image-digest") == []


@pytest.mark.parametrize("revision", ["main", None, SHA.upper(), SHA[:12]])
def test_model_revision_must_be_a_sha(revision: str | None) -> None:
    desired = state([host("h0")], [model("m", revision=revision)], [lane("l", "m", ["h0"])])
    [v] = run(desired, "model-revision")
    assert v.severity == "deny"
    assert "40-hex commit sha" in v.message


def test_model_revision_sha_passes() -> None:
    desired = state([host("h0")], [model("m", revision=SHA)], [lane("l", "m", ["h0"])])
    assert run(desired, "model-revision") == []
