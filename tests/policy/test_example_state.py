"""The repository's own state and policies, loaded as `lanes check` loads them (the issue's "Must show")."""

from __future__ import annotations

import json
import math

import pytest

from reconciler.policy import Verdict, evaluate
from reconciler.spec.load import DesiredState

from .builders import GIB, repo_policies, repo_state, with_lanes
from .test_calibration import sglang_pool_tokens

pytestmark = pytest.mark.timeout(30)

GLM = "glm53-mxfp4-fp8-4x-r39"
MINIMAX = "minimax-m31-flash-4x-flare"
PRODUCTION = "dsv41-flash-1017-4x-sglang"
NIGHTLY = "eugr-nightly-dsv41-3x"


@pytest.fixture(scope="module")
def desired() -> DesiredState:
    return repo_state("HEAD")


@pytest.fixture(scope="module")
def verdict(desired: DesiredState) -> Verdict:
    return evaluate(desired, repo_policies())


def switch(desired: DesiredState, **wanted: str) -> DesiredState:
    lanes = [desired.lanes[name].model_copy(update={"desired": state}) for name, state in wanted.items()]
    return with_lanes(desired, *lanes)


def test_example_state_passes(verdict: Verdict) -> None:
    assert verdict.ok
    assert [v for v in verdict.violations if v.severity == "deny"] == []
    body = verdict.to_json()
    assert set(body) == {"commit", "ok", "violations", "ports", "budgets"}  # budgets: every lane, fitting or not
    assert body["ports"]["dsv41-flash-1017-4x-sglang"] == {"api": "8000", "dist": "28000"}  # type: ignore[index]
    assert body["commit"] == "HEAD"
    json.dumps(body)  # serialisable as it is


def test_every_lane_is_budgeted_running_or_not(verdict: Verdict, desired: DesiredState) -> None:
    lanes = {b.lane for b in verdict.budgets}
    assert lanes == set(desired.lanes)
    assert len(verdict.budgets) == sum(len(lane.hosts) for lane in desired.lanes.values())


def test_glm_full_lane_is_explained_by_numbers(verdict: Verdict) -> None:
    ranks = verdict.lane_budgets(GLM)
    assert len(ranks) == 4
    for rank in ranks:
        # vLLM's overhead (rules.yaml overhead_gib.vllm, 6.9 GiB) is inside its budget, ceil(0.88 x total).
        assert rank.need == rank.weights + rank.kv_min + int(6.9 * GIB)
        assert rank.budget == math.ceil(0.88 * int(121.7 * GIB))
        # The note: the full lane "does not fit comfortably". With its 99 GiB per rank read as weights alone
        # (state/models/glm-5.3-mxfp4.yaml) it does not fit at all; test_example_fleet.py works out why.
        assert rank.headroom < 0
        assert not rank.running
    # Its known upstream issues (Ray's busy spin, the start-time free-memory check) are tested in test_known_issues.
    found = [v for v in verdict.lane_violations(GLM) if v.rule != "known-issues"]
    assert {v.rule for v in found} == {"memory-budget", "boot-utilization"}
    assert all(v.severity == "warn" for v in found)
    # One finding for the lane, naming its four ranks, with the worst rank's figures.
    [v] = [v for v in found if v.rule == "memory-budget"]
    assert v.detail["ranks"] == "0,1,2,3"
    assert "lane is stopped, would be denied when started" in v.message
    assert v.detail["need"] == ranks[0].need
    assert v.detail["utilization"] == 0.88
    for key in ("weights", "kv_min", "overhead", "need", "budget"):
        assert isinstance(v.detail[key], int)
    [boot] = [v for v in found if v.rule == "boot-utilization"]
    assert boot.detail["utilization"] == 0.88
    assert boot.detail["fitting_utilization"] == 0.83  # floor(101.5 / 121.7 x 100) / 100: vLLM's start check
    assert "0.88" in boot.message
    assert "101.5 GiB" in boot.message


def test_production_is_warned_of_its_small_pool_and_nightly_has_no_findings(verdict: Verdict) -> None:
    # SGLang leaves production 0.80 x 101.5 GiB - 71.5 GiB of weights = 9.7 GiB of KV pool per rank (its recipe
    # measured 7.2-10.9 GiB over its boots: test_calibration.py), under the 10 GiB headroom margin: a warning.
    [found] = verdict.lane_violations(PRODUCTION)
    assert (found.rule, found.severity) == ("memory-budget", "warn")
    assert found.detail["ranks"] == "0,1,2,3"
    assert all(8 * GIB < b.headroom < 10 * GIB for b in verdict.lane_budgets(PRODUCTION))
    assert verdict.lane_violations(NIGHTLY) == []


def test_the_check_report_counts_productions_pool_in_sglangs_tokens(verdict: Verdict) -> None:
    # 9.66 GiB of pool per rank, less SGLang's fixed 0.97 GiB, at 1,632.5 B per token (test_calibration.py):
    # 5,720,320 tokens. The vLLM lanes' pools carry no engine count (null).
    for rank in verdict.lane_budgets(PRODUCTION):
        assert rank.to_json()["pool_tokens"] == sglang_pool_tokens(rank.pool) == 5_720_320
    assert all(rank.to_json()["pool_tokens"] is None for rank in verdict.lane_budgets(NIGHTLY))


def test_minimax_weights_per_rank(verdict: Verdict) -> None:
    for rank in verdict.lane_budgets(MINIMAX):
        assert rank.weights == 63_100_000_000  # 252.4 GB / 4: the note's ~63 GB per rank
        assert round(rank.weights / GIB, 1) == 58.8


def test_minimax_passes_when_it_replaces_production(desired: DesiredState) -> None:
    swapped = switch(desired, **{MINIMAX: "running", PRODUCTION: "stopped"})
    verdict = evaluate(swapped, repo_policies())
    assert verdict.ok
    # FLARE publishes no parser to build a flag table from: its flags are not checked, and it says so.
    assert [(v.rule, v.severity, v.detail["field"]) for v in verdict.lane_violations(MINIMAX)] == [
        ("engine-flags", "warn", "engine_version")
    ]
    assert all(b.running and b.headroom > 10 * GIB for b in verdict.lane_budgets(MINIMAX))


def test_minimax_next_to_production_is_denied_naming_both(desired: DesiredState) -> None:
    both = switch(desired, **{MINIMAX: "running"})
    verdict = evaluate(both, repo_policies())
    assert not verdict.ok
    assert verdict.denied_lanes == frozenset({MINIMAX, PRODUCTION})
    for lane, other in ((MINIMAX, PRODUCTION), (PRODUCTION, MINIMAX)):
        rules = {v.rule: v for v in verdict.lane_violations(lane) if v.severity == "deny"}
        assert set(rules) == {"host-sharing", "port-clash"}
        for v in rules.values():
            assert other in v.message
            assert v.detail["hosts"] == "dgx1,dgx2,dgx3,dgx4"
        sharing = rules["host-sharing"].detail
        # Each lane counted in its engine's terms: FLARE (read as vLLM) its whole 0.75 x 121.7 GiB budget,
        # SGLang what it needs; their sum, or SGLang started first, overruns the 101.5 GiB free at boot.
        assert sharing["limit_basis"] == "boot_free" and sharing["limit_gib"] == 101.5
        assert float(sharing[f"take_gib[{MINIMAX}]"]) == round(math.ceil(0.75 * int(121.7 * GIB)) / GIB, 2)
