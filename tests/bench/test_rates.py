"""llama-benchy's generation rates, counted in usage tokens and in stream chunks, on known times (seconds)."""

from __future__ import annotations

import pytest

from reconciler.bench import rates
from reconciler.bench.client import RequestRecord

pytestmark = pytest.mark.timeout(10)


def speculative(first: float = 1.0, step: float = 0.005, per_chunk: int = 4, chunks: int = 4) -> RequestRecord:
    """A stream as an engine with 3 speculative tokens sends it: the prefill's one token, then 4 per chunk."""
    sizes = [1] + [per_chunk] * (chunks - 1)
    times, sent = [], 0
    for size in sizes:
        sent += size
        times.append(first + (sent - 1) * step)  # a chunk arrives with its last token
    return RequestRecord(
        t_send=0.0,
        t_end=times[-1] + 0.001,
        t_first_response=first,
        chunk_times=times,
        chunk_tokens=[1] * len(times),  # no token_ids in the chunks
        prompt_tokens=100,
        completion_tokens=sent,
    )


def test_usage_tokens_are_spread_evenly_from_the_first_chunk_to_the_last() -> None:
    assert rates.interpolate([1.0, 1.5, 3.0], 5) == pytest.approx([1.0, 1.5, 2.0, 2.5, 3.0])
    assert rates.interpolate([2.0], 3) == [2.0, 2.0, 2.0]  # one chunk: every token at its time
    assert rates.interpolate([2.0, 2.0], 2) == [2.0, 2.0]
    assert rates.interpolate([1.0, 2.0], 1) == [1.0]
    assert rates.interpolate([], 4) == [] and rates.interpolate([1.0], 0) == []


def test_a_speculative_stream_reads_four_times_faster_in_tokens_than_in_chunks() -> None:
    record = speculative()  # 13 tokens in 4 chunks over 60 ms
    usage, chunks = rates.token_times(record, "usage_tokens"), rates.token_times(record, "stream_chunks")
    assert len(usage) == 13 and chunks == record.chunk_times
    # (tokens after the first) / (last - first): 12 / 0.06 against 3 / 0.06.
    assert rates.request_rate(usage) == pytest.approx(200.0)
    assert rates.request_rate(chunks) == pytest.approx(50.0)
    # Under a second from first to last: all of them over that time (llama-benchy's short-burst peak).
    assert rates.peak_rate(usage) == pytest.approx(13 / 0.06)
    assert rates.peak_rate(chunks) == pytest.approx(4 / 0.06)


def test_without_usage_the_chunks_are_the_tokens() -> None:
    record = speculative()
    record.completion_tokens = None
    assert rates.token_times(record, "usage_tokens") == record.chunk_times


def test_the_peak_is_the_busiest_second() -> None:
    steady = [i * 0.125 for i in range(17)]  # 8 per second for 2 s
    assert rates.peak_rate(steady) == 8.0  # a window ending at a token holds the 8 after (end - 1 s)
    burst = steady + [1.5 + i * 0.01 for i in range(1, 9)]  # 8 more inside one second
    assert rates.peak_rate(burst) == 16.0
    assert rates.peak_rate([5.0, 5.0, 5.0]) == 3.0  # one instant: the count over the window
    assert rates.peak_rate([4.0]) == 1.0 and rates.peak_rate([]) is None


def test_decode_counts_tokens_after_the_first_instant() -> None:
    assert rates.decode_tokens([1.0, 1.0, 1.0, 2.0, 3.0]) == 2  # tokens sharing the first instant are prefill's
    assert rates.decode_tokens([1.0]) == 0 and rates.request_rate([1.0]) is None
    assert rates.request_rate([1.0, 1.0]) is None  # no decode time


def test_a_batch_counts_every_decode_token_over_its_whole_span() -> None:
    a = [1.0 + i * 0.1 for i in range(11)]  # 10 decode tokens from 1.0 to 2.0
    b = [1.5 + i * 0.1 for i in range(11)]  # 10 more from 1.5 to 2.5
    assert rates.batch_rate([a, b]) == pytest.approx(20 / 1.5)
    assert rates.batch_rate([a, []]) == pytest.approx(10.0)
    assert rates.batch_rate([]) is None and rates.batch_rate([[1.0]]) is None


def test_a_run_counts_usage_tokens_only_when_every_answer_reported_them() -> None:
    with_usage, without = speculative(), speculative()
    without.completion_tokens = None
    failed = RequestRecord(t_send=0.0, error="HTTP 500: boom")
    assert rates.run_basis([with_usage, with_usage, failed]) == "usage_tokens"
    assert rates.run_basis([with_usage, without]) == "stream_chunks"
    assert rates.run_basis([failed]) == "stream_chunks"
