"""`lanes check --json`: every lane's per-rank figures, fitting or not, in the shape `lanes schema` describes."""

from __future__ import annotations

import json
import math

import pytest

from reconciler.cli.schema import json_schema
from reconciler.facts.observed import Memory, ObservedContainer, ObservedFleet, ObservedHost
from reconciler.policy import evaluate
from reconciler.policy.hostmem import from_observation
from reconciler.policy.report import CheckReport

from .builders import GIB, gqa, one_lane_state, repo_policies, repo_state

pytestmark = pytest.mark.timeout(60)


def test_a_lane_that_fits_has_its_figures_in_the_payload() -> None:
    desired = one_lane_state(gqa(layers=2, kv_heads=8, head_dim=64, num_heads=8), tp=2, kv_cache_dtype="bf16")
    verdict = evaluate(desired, repo_policies())
    assert [v for v in verdict.violations if v.rule == "memory-budget"] == []  # nothing to report ...
    body = json.loads(json.dumps(verdict.to_json()))
    report = CheckReport.model_validate(body)  # strict: no field the schema does not describe
    ranks = report.budgets["l"].ranks  # ... and the figures are there anyway
    assert [r.rank for r in ranks] == [0, 1]
    r0 = ranks[0]
    # weights 10 GiB / 2; KV 2 x ceil(8 / 2) x 64 x 2 B x 2 layers x 1000 tokens; vLLM 6.9 GiB overhead.
    assert r0.weights == 5 * GIB
    assert r0.kv_min == 2 * 4 * 64 * 2 * 2 * 1000
    assert r0.need == 5 * GIB + 2 * 4 * 64 * 2 * 2 * 1000 + int(6.9 * GIB)
    assert r0.budget == math.ceil(0.8 * int(121.7 * GIB))
    assert r0.headroom == r0.budget - r0.need
    assert (r0.base.kind, r0.base.origin) == ("torch_visible", "profile")
    assert r0.base.source.startswith("policies/hardware.yaml gb10.torch_visible")
    assert (r0.boot_free.bytes, r0.boot_free.origin) == (int(101.5 * GIB), "profile")
    assert r0.flag == "--gpu-memory-utilization"


def test_the_example_fleet_payload_validates() -> None:
    verdict = evaluate(repo_state("HEAD"), repo_policies())
    report = CheckReport.model_validate(json.loads(json.dumps(verdict.to_json())))
    assert set(report.budgets) == set(repo_state("HEAD").lanes)


def test_lanes_schema_describes_the_check_output() -> None:
    schema = json_schema("check")
    assert schema["title"] == "lanes check --json output"
    assert set(schema["required"]) == {"commit", "ok", "violations", "ports", "budgets"}
    rank = schema["$defs"]["RankFigures"]
    for key in ("weights", "kv_min", "overhead", "need", "budget", "headroom", "base", "boot_free", "flag"):
        assert key in rank["properties"], key
    assert rank["additionalProperties"] is False


def _host(name: str, available_gib: int, lanes: tuple[str, ...] = ()) -> ObservedHost:
    containers = tuple(
        ObservedContainer(
            name=f"lanes-{lane}",
            id="x",
            image="i",
            image_id="i",
            state="running",
            exit_code=None,
            labels={"lanes.managed": "true", "lanes.lane": lane},
        )
        for lane in lanes
    )
    return ObservedHost(
        host=name,
        reachable=True,
        error=None,
        containers=containers,
        unmanaged=(),
        listening=frozenset(),
        memory=Memory(total_bytes=121 * GIB, available_bytes=available_gib * GIB, cached_bytes=0),
        disk_free=None,
        disk_total=None,
        models={},
        lease=None,
        probe_errors=(),
        probed_at=1_700_000_000.0,
    )


def test_observations_become_boot_figures_only_on_idle_hosts() -> None:
    fleet = ObservedFleet(
        hosts={"h0": _host("h0", 99), "h1": _host("h1", 40, ("busy-lane",)), "h2": ObservedHost.unreachable("h2", "x")}
    )
    memory = from_observation(fleet)
    assert set(memory) == {"h0", "h1"}
    assert (memory["h0"].available, memory["h0"].busy) == (99 * GIB, ())
    assert memory["h1"].busy == ("busy-lane",)
    desired = one_lane_state(gqa(), engine="sglang", tp=2)
    verdict = evaluate(desired, repo_policies(), host_memory=memory)
    # h0 is idle and observed at 99 GiB, h1 is busy: its profile's 101.5 GiB. SGLang takes the minimum: 99.
    for rank in verdict.budgets:
        assert (rank.base_bytes, rank.base_origin) == (99 * GIB, "observed")
        assert rank.budget == int(0.8 * 99 * GIB)
    report = CheckReport.model_validate(json.loads(json.dumps(verdict.to_json())))
    r0, r1 = report.budgets["l"].ranks
    assert (r0.boot_free.origin, r0.boot_free.observed_at) == ("observed", 1_700_000_000.0)
    assert (r1.boot_free.origin, r1.boot_free.observed_at) == ("profile", None)  # h1 was busy
