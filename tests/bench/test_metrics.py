"""llama-benchy's definitions on records with known times (seconds)."""

from __future__ import annotations

import pytest

from reconciler.bench.client import RequestRecord
from reconciler.bench.metrics import Shape, batch_totals, request_figures, stat, summarize

pytestmark = pytest.mark.timeout(10)


def record(
    send: float, first: float, step: float, n: int, prompt: int = 1000, role_at: float | None = None
) -> RequestRecord:
    times = [first + i * step for i in range(n)]
    return RequestRecord(
        t_send=send,
        t_end=times[-1] + 0.002,
        t_first_response=role_at if role_at is not None else first,
        chunk_times=times,
        chunk_tokens=[1] * n,
        prompt_tokens=prompt,
        completion_tokens=n,
    )


def test_one_request() -> None:
    f = request_figures(record(10.0, 10.51, 0.02, 51), latency_s=0.01, expected_prompt_tokens=999)
    assert f.ttfr_s == pytest.approx(0.51) and f.est_ppt_s == pytest.approx(0.5)
    assert f.pp_tps == pytest.approx(1000 / 0.5)  # the server's count, not the expected one
    assert f.tg_tps == pytest.approx(50 / 1.0)  # (n - 1) / (t_last - t_first)
    assert f.itl_s == pytest.approx(0.02) and f.e2e_s == pytest.approx(1.512)


def test_est_ppt_never_goes_below_zero_and_missing_usage_falls_back() -> None:
    r = record(0.0, 0.005, 0.01, 2)
    r.prompt_tokens = None
    f = request_figures(r, latency_s=0.05, expected_prompt_tokens=64)
    assert f.est_ppt_s == 0.0 and f.pp_tps is None and f.prompt_tokens == 64
    single = request_figures(record(0.0, 0.1, 0.01, 1), 0.0, 10)
    assert single.tg_tps is None and single.itl_s is None  # one token has no decode time


def test_batch_totals_follow_llama_benchy() -> None:
    batch = [record(0.0, 1.0, 0.1, 11), record(0.1, 1.1, 0.1, 11)]
    pp, tg = batch_totals(batch, 1000)
    assert pp == pytest.approx(2000 / 1.1)  # all prompt tokens / (last first token - first send)
    assert tg == pytest.approx(20 / (2.1 - 1.0))  # (all tokens - requests) / (last token - first first token)


def test_summarize_at_concurrency_1_reports_per_request_as_total() -> None:
    shape = Shape(pp=1000, tg=51, depth=0, concurrency=1)
    rows = summarize(shape, [[record(0.0, 0.5, 0.02, 51)], [record(5.0, 5.4, 0.02, 51)]], latency_s=0.0)
    assert rows["pp_throughput"] == rows["pp_req_throughput"]
    assert rows["pp_throughput"]["values"] == pytest.approx([2000.0, 2500.0])
    assert rows["ttfr"]["mean"] == pytest.approx(450.0) and rows["ttfr"]["std"] == pytest.approx(50.0)
    assert rows["tg_throughput"]["mean"] == pytest.approx(50.0)
    assert (rows["prompt_size"], rows["response_size"], rows["context_size"]) == (1000, 51, 0)
    assert rows["errors"] == 0 and rows["requests"] == 2


def test_summarize_counts_failed_requests_and_leaves_them_out() -> None:
    shape = Shape(pp=1000, tg=11, depth=0, concurrency=2)
    bad = RequestRecord(t_send=0.0, t_end=0.1, error="HTTP 500: boom")
    row = summarize(shape, [[record(0.0, 1.0, 0.1, 11), bad]], latency_s=0.0)
    assert row["errors"] == 1 and row["requests"] == 2
    assert len(row["tg_req_throughput"]["values"]) == 1 and len(row["tg_throughput"]["values"]) == 1


def test_stat_is_the_population_standard_deviation() -> None:
    assert stat([1.0, 3.0]) == {"mean": 2.0, "std": 1.0, "values": [1.0, 3.0]}
    assert stat([5.0])["std"] == 0.0


def test_shape_labels_in_llama_bench_notation() -> None:
    assert Shape(2048, 128, 0, 1).label() == "pp2048/tg128 c1"
    assert Shape(2048, 128, 4096, 4).label() == "pp2048/tg128 @ d4096 c4"
