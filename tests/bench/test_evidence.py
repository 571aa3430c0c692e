"""Evidence: comparison with a baseline, the noise rule, trailers, paths, parsing."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from reconciler.bench import evidence
from reconciler.errors import InputError
from reconciler.spec.bench import NoiseRule

pytestmark = pytest.mark.timeout(10)

RULE = NoiseRule(k=2.0, min_relative=0.03)


def metric(mean: float, std: float = 0.0) -> dict[str, Any]:
    return {"mean": mean, "std": std, "values": [mean - std, mean + std] if std else [mean]}


def make(pp: float = 2000.0, tg: float = 50.0, ttft: float = 1000.0, std: float = 0.0, **top: Any) -> dict[str, Any]:
    row = {
        "concurrency": 1,
        "context_size": 0,
        "prompt_size": 2048,
        "response_size": 128,
        "is_context_prefill_phase": False,
        "pp_throughput": metric(pp, std * pp),
        "pp_req_throughput": metric(pp, std * pp),
        "tg_throughput": metric(tg, std * tg),
        "tg_req_throughput": metric(tg, std * tg),
        "e2e_ttft": metric(ttft, std * ttft),
        "itl": None,
    }
    return {
        "lane": "dsv41",
        "commit": "ab" * 20,
        "time": "2026-10-23T12:00:00Z",
        "benchmarks": [row],
        "regression": False,
        **top,
    }


def by_metric(comparison: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["metric"]: m for m in comparison["metrics"]}


def test_a_20_percent_tg_drop_with_small_spread_is_a_regression() -> None:
    c = evidence.compare(make(tg=40.0, std=0.01), make(std=0.01), RULE)
    tg = by_metric(c)["tg_throughput"]
    assert tg["delta"] == pytest.approx(-10.0) and tg["relative"] == pytest.approx(-0.2)
    assert tg["beyond_noise"] and tg["verdict"] == "worse"
    assert by_metric(c)["pp_throughput"]["verdict"] == "same"
    assert c["regression"] is True and c["regressions"] == [
        "tg_throughput pp2048/tg128 c1: -20.0%",
        "tg_req_throughput pp2048/tg128 c1: -20.0%",
    ]


def test_the_same_drop_inside_a_wide_spread_is_noise() -> None:
    c = evidence.compare(make(tg=40.0, std=0.12), make(std=0.12), RULE)
    tg = by_metric(c)["tg_throughput"]
    assert not tg["beyond_noise"] and tg["verdict"] == "same" and tg["noise"] > 10
    assert c["regression"] is False


def test_a_tiny_change_with_no_spread_is_below_the_relative_floor() -> None:
    c = evidence.compare(make(tg=49.0), make(), RULE)  # -2%, std 0: beyond k x std, under 3%
    assert by_metric(c)["tg_throughput"]["verdict"] == "same" and c["regression"] is False


def test_faster_is_better_and_slower_latency_is_worse_but_not_a_regression() -> None:
    c = evidence.compare(make(pp=2600.0, ttft=1300.0), make(), RULE)
    assert by_metric(c)["pp_throughput"]["verdict"] == "better"
    assert by_metric(c)["e2e_ttft"]["verdict"] == "worse"
    assert c["regression"] is False and c["improvements"][0].startswith("pp_throughput")


def test_rows_are_matched_on_their_shape_only() -> None:
    other = make()
    other["benchmarks"][0]["concurrency"] = 4
    c = evidence.compare(make(tg=10.0), other, RULE)
    assert c["metrics"] == [] and c["matched_rows"] == 0 and not c["regression"]


def test_a_zero_baseline_compares_by_noise_alone() -> None:
    c = evidence.compare(make(tg=5.0), make(tg=0.0), RULE)
    assert by_metric(c)["tg_throughput"]["relative"] is None
    assert by_metric(c)["tg_throughput"]["verdict"] == "better"


def test_headline_trailers_and_path() -> None:
    ev = make(pp=1994.54, tg=52.94)
    # Evidence that does not say what tg counts was written when usage tokens were counted.
    assert evidence.headline(ev) == {"pp": "pp2048 1994.5 t/s", "tg": "tg128 52.9 t/s (usage tokens)"}
    assert evidence.trailers(ev) == [
        ("Lane", "dsv41"),
        ("Evidence-For", "ab" * 20),
        ("pp", "pp2048 1994.5 t/s"),
        ("tg", "tg128 52.9 t/s (usage tokens)"),
    ]
    assert evidence.headline({**ev, "tg_basis": "stream_chunks"})["tg"] == "tg128 52.9 t/s (stream chunks)"
    assert evidence.evidence_path(ev) == "evidence/dsv41/20261023T120000Z-abababababab.json"
    paths = [
        "evidence/dsv41/20261023T120000Z-abababababab.json",
        "evidence/dsv41/20261024T080000Z-cdcdcdcdcdcd.json",
        "evidence/dsv41/notes.md",
        "evidence/other/20261025T000000Z-efefefefefef.json",
    ]
    assert evidence.latest(paths, "dsv41") == "evidence/dsv41/20261024T080000Z-cdcdcdcdcdcd.json"
    assert evidence.latest(paths, "none") is None
    assert evidence.headline({"benchmarks": []}) == {}


def test_headline_prefers_concurrency_1_at_the_lowest_depth() -> None:
    ev = make()
    deep = copy.deepcopy(ev["benchmarks"][0])
    deep["context_size"], deep["tg_throughput"] = 8192, metric(30.0)
    many = copy.deepcopy(ev["benchmarks"][0])
    many["concurrency"], many["tg_throughput"] = 4, metric(150.0)
    ev["benchmarks"] = [deep, many, ev["benchmarks"][0]]
    assert evidence.headline(ev)["tg"] == "tg128 50.0 t/s (usage tokens)"


def test_loads_checks_the_shape() -> None:
    assert evidence.loads(evidence.dumps(make()))["lane"] == "dsv41"
    with pytest.raises(InputError, match="not JSON"):
        evidence.loads("{", "x.json")
    with pytest.raises(InputError, match="no 'benchmarks' list"):
        evidence.loads('{"lane": "x"}', "x.json")
    with pytest.raises(InputError) as err:
        evidence.loads('{"benchmarks": [{"prompt_size": 1}]}', "x.json")
    assert err.value.field == "benchmarks[0].response_size" and err.value.file == "x.json"


def test_identity_reads_the_digest() -> None:
    ident = evidence.LaneIdentity("l", "c", "sglang", "0.5.22", "repo/img@sha256:" + "0f" * 32, ("a",))
    assert ident.image_digest == "sha256:" + "0f" * 32
    assert evidence.LaneIdentity("l", "c", "vllm", "1", "repo/img:latest", ("a",)).image_digest is None


def test_evidence_from_before_tg_basis_loads_and_compares_with_new_evidence() -> None:
    old = make(tg=50.0)  # no tg_basis, no is_context_prefill_phase, no peak or chunk figures
    del old["benchmarks"][0]["is_context_prefill_phase"]
    loaded = evidence.loads(evidence.dumps(old))
    assert evidence.tg_basis(loaded) == "usage_tokens"
    new = make(tg=40.0, tg_basis="usage_tokens")
    new["benchmarks"][0].update(
        tg_basis="usage_tokens", tg_throughput_chunks=metric(10.0), peak_throughput=metric(41.0)
    )
    c = evidence.compare(new, loaded, RULE)
    assert c["matched_rows"] == 1 and c["tg_basis"] == {"current": "usage_tokens", "baseline": "usage_tokens"}
    assert by_metric(c)["tg_throughput"]["verdict"] == "worse" and c["regression"] is True
    assert "tg_throughput_chunks" not in by_metric(c) and "peak_throughput" not in by_metric(c)  # nothing to compare


def test_tg_counted_in_other_units_is_not_compared() -> None:
    tokens = make(tg=200.0, tg_basis="usage_tokens")
    chunks = make(tg=50.0, tg_basis="stream_chunks")
    for row, value in ((tokens["benchmarks"][0], 50.0), (chunks["benchmarks"][0], 50.0)):
        row["tg_throughput_chunks"] = metric(value)
    c = evidence.compare(tokens, chunks, RULE)
    assert c["tg_basis"] == {"current": "usage_tokens", "baseline": "stream_chunks"}
    assert not {"tg_throughput", "tg_req_throughput"} & set(by_metric(c))  # 4x by the unit, not by speed
    assert by_metric(c)["tg_throughput_chunks"]["verdict"] == "same" and by_metric(c)["pp_throughput"]
    assert c["regression"] is False


def test_context_load_rows_are_matched_apart_from_the_measured_rows() -> None:
    base, now = make(pp=2000.0), make(pp=2000.0)
    for ev, ctx_pp in ((base, 9000.0), (now, 4000.0)):
        ctx = copy.deepcopy(ev["benchmarks"][0])
        ctx["is_context_prefill_phase"], ctx["pp_throughput"] = True, metric(ctx_pp)
        ev["benchmarks"].insert(0, ctx)
    c = evidence.compare(now, base, RULE)
    assert c["matched_rows"] == 2
    pp = [m for m in c["metrics"] if m["metric"] == "pp_throughput"]
    assert [(m["context_phase"], m["verdict"]) for m in pp] == [(True, "worse"), (False, "same")]
    assert pp[0]["shape"] == "ctx for pp2048/tg128 c1"
    assert evidence.headline(now)["pp"] == "pp2048 2000.0 t/s"  # the measured row, never the context load
