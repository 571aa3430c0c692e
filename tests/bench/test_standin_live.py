"""`lanes bench` against real engine stand-in processes: accuracy, regression, evidence, chart.

The stand-in paces each request on its own: the first token after
prompt_tokens / STANDIN_PP_TPS seconds, then one token every 1 / STANDIN_TG_TPS
seconds. Per request, the measured pp and tg must match those settings
within 3% at concurrency 1 and 4; the batch totals at concurrency 4 are about
four times the per-request rates. A stand-in 20% slower (STANDIN_SLOWDOWN=1.25)
must be flagged as a regression against the first run's evidence.

These are wall-clock measurements on a small shared machine, where a process
can be stalled for tens of milliseconds: the accuracy check measures a second
time when the first misses. A harness error would miss both times.
"""

from __future__ import annotations

import asyncio
import json
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from reconciler.bench import chart, evidence
from reconciler.bench.evidence import LaneIdentity, build_evidence
from reconciler.bench.runner import BenchRun, Progress, run_profile
from reconciler.spec.bench import BenchProfile

from .conftest import MODEL, StartStandin

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

PP_TPS = 500.0
TG_TPS = 200.0
PROFILE = BenchProfile(name="accuracy", pp=(512,), tg=(64,), concurrency=(1, 4), repetitions=3, warmup=1)
IDENTITY = LaneIdentity(
    lane="bench-lane",
    commit="c0ffee" + "0" * 34,
    engine="vllm",
    engine_version="0.32.0",
    image="vllm/vllm-openai@sha256:" + "ab" * 32,
    hosts=("dgx5", "dgx6"),
)
PER_METRIC = ("mean", "std", "values")


def _run(url: str, progress: list[Progress] | None = None) -> BenchRun:
    callback = progress.append if progress is not None else None
    return asyncio.run(run_profile(PROFILE, url=url, model=MODEL, progress=callback))


@pytest.fixture(scope="module")
def standin_url(start_standin: StartStandin) -> str:
    return start_standin(STANDIN_PP_TPS=str(PP_TPS), STANDIN_TG_TPS=str(TG_TPS))


@pytest.fixture(scope="module")
def baseline_run(standin_url: str) -> tuple[BenchRun, list[Progress]]:
    seen: list[Progress] = []
    return _run(standin_url, seen), seen


@pytest.fixture(scope="module")
def baseline_evidence(baseline_run: tuple[BenchRun, list[Progress]]) -> dict[str, Any]:
    return build_evidence(baseline_run[0], IDENTITY)


def _row(ev_or_run: Any, concurrency: int) -> dict[str, Any]:
    rows = ev_or_run.rows if isinstance(ev_or_run, BenchRun) else ev_or_run["benchmarks"]
    return next(r for r in rows if r["concurrency"] == concurrency)


def _ratios(run: BenchRun, concurrency: int) -> tuple[float, float]:
    row = _row(run, concurrency)
    assert row["errors"] == 0 and row["requests"] == concurrency * PROFILE.repetitions
    return row["pp_req_throughput"]["mean"] / PP_TPS, row["tg_req_throughput"]["mean"] / TG_TPS


@pytest.mark.parametrize("concurrency", [1, 4])
def test_pp_and_tg_match_the_configured_pacing_within_3_percent(
    baseline_run: tuple[BenchRun, list[Progress]], standin_url: str, concurrency: int
) -> None:
    run = baseline_run[0]
    pp, tg = _ratios(run, concurrency)
    if abs(pp - 1) >= 0.03 or abs(tg - 1) >= 0.03:
        run = _run(standin_url)  # a stalled machine, or a harness error: measure again
        pp, tg = _ratios(run, concurrency)
    assert abs(pp - 1) < 0.03, f"pp {_row(run, concurrency)['pp_req_throughput']} vs {PP_TPS}"
    assert abs(tg - 1) < 0.03, f"tg {_row(run, concurrency)['tg_req_throughput']} vs {TG_TPS}"
    # The stand-in paces every request on its own thread, so the batch totals add up
    # (loosely: a batch total rests on one first and one last token of the batch).
    row = _row(run, concurrency)
    assert row["tg_throughput"]["mean"] / (concurrency * TG_TPS) == pytest.approx(1, abs=0.15)
    assert row["pp_throughput"]["mean"] / (concurrency * PP_TPS) == pytest.approx(1, abs=0.15)


def test_prompts_have_the_size_the_server_counts(baseline_run: tuple[BenchRun, list[Progress]]) -> None:
    run = baseline_run[0]
    # The stand-in counts whitespace-separated words: one word is one token, nothing added.
    assert run.fit.per_word == pytest.approx(1.0) and run.fit.fixed == pytest.approx(0.0, abs=1e-6)
    assert run.sized_tokens == {(512, 0): 512}
    for row in run.rows:
        assert row["prompt_tokens"]["values"] == [512.0] * len(row["prompt_tokens"]["values"])
        assert set(row["completion_tokens"]["values"]) == {64.0}


def test_latency_and_times_are_consistent(baseline_run: tuple[BenchRun, list[Progress]]) -> None:
    run = baseline_run[0]
    assert 0 < run.latency_s < 0.05, "a one-token request on 127.0.0.1 takes milliseconds"
    row = _row(run, 1)
    expected_ttft_ms = 512 / PP_TPS * 1000
    assert row["e2e_ttft"]["mean"] == pytest.approx(expected_ttft_ms, rel=0.06)
    assert row["itl"]["mean"] == pytest.approx(1000 / TG_TPS, rel=0.06)
    assert row["e2e_latency"]["mean"] > row["e2e_ttft"]["mean"] + 63 * 1000 / TG_TPS * 0.95


def test_progress_is_reported_to_the_end(baseline_run: tuple[BenchRun, list[Progress]]) -> None:
    seen = baseline_run[1]
    assert seen and seen[-1].done == seen[-1].total
    assert [p.done for p in seen] == sorted(p.done for p in seen)
    assert any("warmup" in p.label for p in seen) and any("latency" in p.label for p in seen)


def test_evidence_keeps_llama_benchys_shape_and_says_what_was_measured(baseline_evidence: dict[str, Any]) -> None:
    ev = json.loads(evidence.dumps(baseline_evidence))  # survives JSON as is
    for key in ("version", "timestamp", "latency_mode", "latency_ms", "model", "prefix_caching_enabled"):
        assert key in ev
    assert ev["max_concurrency"] == 4 and ev["model"] == MODEL
    assert ev["lane"] == "bench-lane" and ev["commit"] == IDENTITY.commit
    assert ev["engine"] == "vllm" and ev["engine_version"] == "0.32.0"
    assert ev["image_digest"] == "sha256:" + "ab" * 32 and ev["hosts"] == ["dgx5", "dgx6"]
    assert ev["engine_reported_version"] == "0.0.0+standin"
    assert ev["comparison"] is None and ev["regression"] is False
    assert len(ev["benchmarks"]) == 2
    for row in ev["benchmarks"]:
        assert {"concurrency", "prompt_size", "response_size", "context_size"} <= set(row)
        assert (row["prompt_size"], row["response_size"], row["context_size"]) == (512, 64, 0)
        for metric in ("pp_throughput", "pp_req_throughput", "tg_throughput", "tg_req_throughput", "ttfr"):
            assert set(row[metric]) == set(PER_METRIC)
            assert len(row[metric]["values"]) >= PROFILE.repetitions
        for metric in ("est_ppt", "e2e_ttft", "itl", "e2e_latency"):
            assert len(row[metric]["values"]) == row["concurrency"] * PROFILE.repetitions
    assert evidence.loads(evidence.dumps(ev)) == ev
    assert evidence.headline(ev)["pp"].startswith("pp512 ") and evidence.headline(ev)["tg"].startswith("tg64 ")


def test_a_stand_in_20_percent_slower_is_flagged_as_a_regression(
    start_standin: StartStandin, baseline_evidence: dict[str, Any]
) -> None:
    url = start_standin(STANDIN_PP_TPS=str(PP_TPS), STANDIN_TG_TPS=str(TG_TPS), STANDIN_SLOWDOWN="1.25")
    slow = build_evidence(_run(url), IDENTITY, baseline=baseline_evidence)
    assert slow["regression"] is True
    comparison = slow["comparison"]
    flagged = {(m["metric"], m["concurrency"]) for m in comparison["metrics"] if m["verdict"] == "worse"}
    # Per request at both concurrencies (at 1 that is also the total); a batch total rests on
    # fewer values, so its noise band is wider and it may stay inside it on a busy machine.
    for c in (1, 4):
        for metric in ("pp_req_throughput", "tg_req_throughput"):
            assert (metric, c) in flagged
    assert {("pp_throughput", 1), ("tg_throughput", 1)} <= flagged
    for m in comparison["metrics"]:
        if m["metric"] in ("pp_req_throughput", "tg_req_throughput"):
            assert m["relative"] == pytest.approx(-0.2, abs=0.06), m
            assert m["beyond_noise"] and abs(m["delta"]) > m["noise"]
    assert any(r.startswith("tg_throughput pp512/tg64 c1") for r in comparison["regressions"])
    assert ("Regression", "; ".join(comparison["regressions"][:3])) in evidence.trailers(slow)
    # The chart of the slow run against its baseline is well-formed SVG and shows the regression.
    svg = chart.render_svg(slow, baseline_evidence)
    root = ET.fromstring(svg)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert "REGRESSION" in svg and chart.WORSE_COLOR in svg
