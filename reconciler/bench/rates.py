"""Generation rates the way llama-benchy defines them, counted two ways.

A streamed answer gives two counts of what was generated: the server's
`usage.completion_tokens` (tokens) and the content chunks that arrived
(stream chunks). An engine without speculative decoding sends one token per
chunk and the two agree; with MTP, EAGLE or DSpark one decode step sends the
tokens it accepted in one chunk, and a figure counted in chunks is a figure
of decode steps, not tokens. Both are computed here, from the same arrival
times, and `TgBasis` names which one a figure uses.

Sources (llama-benchy, github eugr/llama-benchy; PyPI llama-benchy 0.4.0,
`llama_benchy/client.py` and `llama_benchy/results.py`):

- per-token times: with `usage.completion_tokens` = N and no `token_ids` in
  the chunks, llama-benchy 0.4.0 spreads N timestamps evenly from the first
  content chunk to the last (`LLMClient._finalize_stream_tokens`, then
  `LLMClient._interpolate_token_timestamps`); with neither usage nor token
  ids (nor a tokenizer) it takes one token per content chunk, at the chunk's
  arrival. llama-benchy 0.3 (git ae09cab, v0.3.0 and two commits) counted
  one token per content chunk always (`LLMClient.run_generation`) and
  ended a request's decode time at the end of the stream.
  Here `usage_tokens` is the first reading and `stream_chunks` the second.
- tg per request: tokens timed strictly after the first one, over the time
  from the first to the last token (`BenchmarkResults._process_batch`,
  `_count_tokens_after_first_timestamp`).
- tg of a batch: the sum of those per-request counts over the time from the
  earliest first token to the latest last token of the batch (same function).
- peak: the most tokens seen within any 1 s window, per second; when all the
  tokens arrived within less than the window, their count over the time from
  the first to the last (`BenchmarkResults._calculate_peak_throughput`).
  Per request over its own tokens (`peak_req_throughput`), per batch over
  the tokens of all its requests (`peak_throughput`).

Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from reconciler.bench.client import RequestRecord

TgBasis = Literal["usage_tokens", "stream_chunks"]
BASIS_WORDS: dict[TgBasis, str] = {"usage_tokens": "usage tokens", "stream_chunks": "stream chunks"}
"""How a basis is written where people read it: `tg (usage tokens)`, `tg (stream chunks)`."""
PEAK_WINDOW_S = 1.0
"""llama-benchy's window (`_calculate_peak_throughput(..., window=1.0)`)."""


def run_basis(records: Sequence[RequestRecord]) -> TgBasis:
    """The basis of a run's headline tg: usage tokens when every answered request reported them.

    One basis for a whole run, so its rows compare with each other; a server
    that leaves `usage` out of even one stream is counted in chunks throughout.
    """
    answered = [r for r in records if r.ok]
    if answered and all(r.completion_tokens is not None for r in answered):
        return "usage_tokens"
    return "stream_chunks"


def interpolate(chunk_times: Sequence[float], tokens: int) -> list[float]:
    """`tokens` timestamps spread evenly from the first chunk to the last.

    llama-benchy 0.4.0, client.py `LLMClient._interpolate_token_timestamps`:
    one token (or one chunk, or no time between first and last) puts every
    token at the first chunk's time.
    """
    if tokens <= 0 or not chunk_times:
        return []
    first, last = chunk_times[0], chunk_times[-1]
    if tokens == 1 or len(chunk_times) == 1 or last <= first:
        return [first] * tokens
    step = (last - first) / (tokens - 1)
    return [first + step * i for i in range(tokens)]


def token_times(record: RequestRecord, basis: TgBasis) -> list[float]:
    """When each generated token (usage basis) or each content chunk (chunk basis) arrived."""
    if basis == "usage_tokens" and record.completion_tokens is not None:
        return interpolate(record.chunk_times, record.completion_tokens)
    return list(record.chunk_times)


def decode_tokens(times: Sequence[float]) -> int:
    """Tokens timed strictly after the first one (llama-benchy 0.4.0 `_count_tokens_after_first_timestamp`)."""
    if len(times) < 2:
        return 0
    first = times[0]
    return sum(1 for t in times if t > first)


def request_rate(times: Sequence[float]) -> float | None:
    """tg of one request: decode tokens / (last token - first token); None when there is no decode time.

    llama-benchy 0.4.0, results.py `BenchmarkResults._process_batch` (`tg_speed`).
    """
    if len(times) < 2:
        return None
    span = times[-1] - times[0]
    counted = decode_tokens(times)
    return counted / span if span > 0 and counted > 0 else None


def batch_rate(per_request: Sequence[Sequence[float]]) -> float | None:
    """tg of a batch: sum of decode tokens / (latest last token - earliest first token).

    llama-benchy 0.4.0, results.py `BenchmarkResults._process_batch` (`batch_tg_throughput`).
    """
    timed = [t for t in per_request if t]
    if not timed:
        return None
    span = max(t[-1] for t in timed) - min(t[0] for t in timed)
    counted = sum(decode_tokens(t) for t in timed)
    return counted / span if span > 0 and counted > 0 else None


def peak_rate(times: Sequence[float], window: float = PEAK_WINDOW_S) -> float | None:
    """The most tokens within any `window` seconds, per second (None without tokens).

    llama-benchy, results.py `BenchmarkResults._calculate_peak_throughput`:
    a window ending at each token counts the tokens after (end - window) up
    to and including it. When every token arrived within less than one
    window, the figure is all the tokens over the time from first to last
    (so a burst of n tokens reads n / (n - 1) times its steady rate, as in
    llama-benchy); when they all arrived at one instant, n / window.
    """
    if not times:
        return None
    ordered = sorted(times)
    span = ordered[-1] - ordered[0]
    if 0 < span < window:
        return len(ordered) / span
    most = 0
    start = 0
    for end, end_time in enumerate(ordered):
        while start < end and ordered[start] <= end_time - window:
            start += 1
        most = max(most, end - start + 1)
    return most / window
