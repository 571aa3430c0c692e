"""llama-benchy's definitions on records with known times (seconds)."""

from __future__ import annotations

import pytest

from reconciler.bench.client import RequestRecord
from reconciler.bench.metrics import Shape, batch_totals, request_figures, row_key, row_label, stat, summarize

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
    totals = batch_totals(batch, 1000)
    assert totals.pp_tps == pytest.approx(2000 / 1.1)  # all prompt tokens / (last first token - first send)
    # (all tokens - requests) / (last token - first first token)
    assert totals.tg_tps == pytest.approx(20 / (2.1 - 1.0))


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


def test_a_row_gives_tg_in_usage_tokens_and_in_stream_chunks() -> None:
    # Three speculative tokens per step: 1 token at 0.5 s, then 16 chunks of 4, one token every 5 ms.
    times = [0.5 + (1 + 4 * i - 1) * 0.005 for i in range(17)]
    spec = RequestRecord(
        t_send=0.0,
        t_end=times[-1] + 0.001,
        t_first_response=times[0],
        chunk_times=times,
        chunk_tokens=[1] * 17,
        prompt_tokens=1000,
        completion_tokens=65,
    )
    row = summarize(Shape(1000, 65, 0, 1), [[spec]], latency_s=0.0, basis="usage_tokens")
    assert row["tg_basis"] == "usage_tokens"
    assert row["tg_throughput"]["values"] == pytest.approx([200.0])  # 64 tokens after the first, in 0.32 s
    assert row["tg_throughput_chunks"]["values"] == pytest.approx([50.0])  # 16 chunks after the first
    assert row["peak_throughput"]["values"] == pytest.approx([65 / 0.32])
    assert row["peak_throughput_chunks"]["values"] == pytest.approx([17 / 0.32])
    assert row["itl"]["values"] == pytest.approx([5.0])
    assert (row["completion_tokens"]["mean"], row["content_chunks"]["mean"]) == (65.0, 17.0)
    assert row["tokens_per_chunk"]["mean"] == pytest.approx(65 / 17)
    by_chunks = summarize(Shape(1000, 65, 0, 1), [[spec]], latency_s=0.0, basis="stream_chunks")
    assert by_chunks["tg_throughput"] == by_chunks["tg_throughput_chunks"] and by_chunks["tg_basis"] == "stream_chunks"


def test_peaks_of_a_batch_are_over_all_its_tokens() -> None:
    shape = Shape(pp=1000, tg=11, depth=0, concurrency=2)
    row = summarize(shape, [[record(0.0, 1.0, 0.05, 11), record(0.0, 1.0, 0.05, 11)]], latency_s=0.0)
    assert row["peak_req_throughput"]["values"] == pytest.approx([22.0, 22.0])  # 11 tokens in 0.5 s
    assert row["peak_throughput"]["values"] == pytest.approx([44.0])  # both requests' tokens in one window
    # Over a second: a window ending at a token leaves out the token exactly one second before it.
    wide = summarize(shape, [[record(0.0, 1.0, 0.125, 17), record(0.0, 1.0, 0.125, 17)]], latency_s=0.0)
    assert wide["peak_req_throughput"]["values"] == [8.0, 8.0] and wide["peak_throughput"]["values"] == [16.0]


def test_the_prefix_cached_mode_counts_the_prompt_after_the_context() -> None:
    shape = Shape(pp=1000, tg=11, depth=4000, concurrency=1)
    load = record(0.0, 2.0, 0.1, 11, prompt=4000)
    follow = record(10.0, 10.5, 0.1, 11, prompt=5000)
    follow.prefix_tokens = 4000  # the context load's prompt, as the server counted it
    ctx = summarize(shape, [[load]], latency_s=0.0, prefix_cached=True, context_phase=True)
    row = summarize(shape, [[follow]], latency_s=0.0, prefix_cached=True)
    assert ctx["is_context_prefill_phase"] is True and row["is_context_prefill_phase"] is False
    assert ctx["pp_throughput"]["values"] == pytest.approx([2000.0])  # 4000 context tokens in 2 s
    assert row["pp_throughput"]["values"] == pytest.approx([2000.0])  # 1000 new tokens in 0.5 s, not 5000
    assert row["prompt_tokens"]["values"] == [1000.0]
    follow.prompt_tokens = None  # no usage: llama-benchy's expected count, the prompt size
    assert summarize(shape, [[follow]], 0.0, prefix_cached=True)["prompt_tokens"]["values"] == [1000.0]
    assert summarize(shape, [[follow]], 0.0)["prompt_tokens"]["values"] == [5000.0]  # pp + depth
    assert row_label(ctx) == "ctx @ d4000 for pp1000/tg11 c1" and row_label(row) == "pp1000/tg11 @ d4000 c1"
    assert row_key(ctx) != row_key(row)
