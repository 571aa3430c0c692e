"""From timed requests to llama-benchy's figures: pp, tg, peak, TTFR, est_ppt, TTFT.

Definitions (llama-benchy's, so Spark users can compare numbers; the
generation rates and their sources are in `rates`):

- `ttfr`: time to first response, send -> first chunk carrying a choice (ms).
- `est_ppt`: estimated prompt processing time = max(0, ttfr - latency) (ms),
  where `latency` is measured once per run (`BenchClient.latency`): the
  time to the first chunk of a one-token request ("generation" mode: network,
  HTTP, scheduling and one decode step) or to a /v1/models answer ("api").
- `e2e_ttft`: send -> first chunk with generated content (ms).
- `pp_req_throughput`: prompt tokens / est_ppt, per request. Prompt tokens
  are the server's `usage.prompt_tokens` and include the depth (llama-benchy
  counts every prompt token the server processed: "pp2048 @ d4096" divides
  6144 tokens by the prefill time). In the prefix-cached mode the context
  was sent first (`RequestRecord.prefix_tokens`) and only the rest counts,
  as llama-benchy counts only the prompt there (runner.py
  `BenchmarkRunner.run_suite`: `expected_pp`).
- `tg_req_throughput`, `tg_throughput`, `peak_req_throughput`,
  `peak_throughput`: `rates`, on the run's `tg_basis` (usage tokens when
  the server reports them); the same four with the suffix `_chunks` count
  stream chunks. At concurrency 1 the totals are the per-request figures.
- `pp_throughput`: at concurrency 1 the per-request figure; above it,
  llama-benchy's batch rate sum(prompt tokens) / (last first-token - first
  send) (results.py `BenchmarkResults._process_batch`).
- Added here: `itl` = (t_last - t_first) / (n - 1) per request on the tg
  basis (ms), `e2e_latency` = send -> end of stream (ms), and the counts
  `completion_tokens` (usage), `content_chunks` and `tokens_per_chunk`.

Every metric is `{mean, std, values}` with the population standard
deviation (numpy's default, which llama-benchy uses) over all measured
requests (or all batches, for totals). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.bench import rates
from reconciler.bench.client import RequestRecord
from reconciler.bench.rates import TgBasis

THROUGHPUT_METRICS = ("pp_throughput", "pp_req_throughput", "tg_throughput", "tg_req_throughput")
"""The figures a regression is judged on (`evidence.compare`)."""
PEAK_METRICS = ("peak_throughput", "peak_req_throughput")
CHUNK_METRICS = (
    "tg_throughput_chunks",
    "tg_req_throughput_chunks",
    "peak_throughput_chunks",
    "peak_req_throughput_chunks",
)
LATENCY_METRICS = ("ttfr", "est_ppt", "e2e_ttft", "itl", "e2e_latency")
COUNT_METRICS = ("prompt_tokens", "completion_tokens", "content_chunks", "tokens_per_chunk")
HIGHER_IS_BETTER = frozenset((*THROUGHPUT_METRICS, *PEAK_METRICS, *CHUNK_METRICS))
ON_TG_BASIS = frozenset(("tg_throughput", "tg_req_throughput", "itl", *PEAK_METRICS))
"""Figures whose meaning depends on the run's `tg_basis`: compared only between runs of one basis."""


@dataclass(frozen=True, order=True)
class Shape:
    """One grid point of a profile."""

    pp: int
    tg: int
    depth: int
    concurrency: int

    def label(self, context_phase: bool = False) -> str:
        depth = f" @ d{self.depth}" if self.depth else ""
        if context_phase:
            # llama-benchy names these rows ctx_pp / ctx_tg (results.py `_generate_rows`).
            return f"ctx{depth} for pp{self.pp}/tg{self.tg} c{self.concurrency}"
        return f"pp{self.pp}/tg{self.tg}{depth} c{self.concurrency}"


def stat(values: Sequence[float]) -> dict[str, Any]:
    """`{mean, std, values}`; std is the population standard deviation."""
    vals = [float(v) for v in values]
    mean = math.fsum(vals) / len(vals)
    var = math.fsum((v - mean) ** 2 for v in vals) / len(vals)
    return {"mean": mean, "std": math.sqrt(var), "values": vals}


@dataclass(frozen=True)
class RequestFigures:
    ttfr_s: float | None
    est_ppt_s: float | None
    e2e_ttft_s: float | None
    pp_tps: float | None
    tg_tps: float | None
    """On the run's tg basis."""
    tg_chunks_tps: float | None
    peak_tps: float | None
    """On the run's tg basis."""
    peak_chunks_tps: float | None
    itl_s: float | None
    e2e_s: float
    prompt_tokens: int
    """Tokens the pp figure divides: the whole prompt, or what followed a cached prefix."""
    completion_tokens: int | None
    content_chunks: int


def prefill_tokens(record: RequestRecord, expected: int) -> int:
    """Prompt tokens this request's prefill processed: the server's count less a prefix sent before."""
    if record.prompt_tokens is None:
        return expected
    return record.prompt_tokens - (record.prefix_tokens or 0)


def request_figures(
    record: RequestRecord, latency_s: float, expected_prompt_tokens: int, basis: TgBasis = "usage_tokens"
) -> RequestFigures:
    """One request's figures; a figure that cannot be computed is None."""
    prompt = prefill_tokens(record, expected_prompt_tokens)
    ttfr = record.t_first_response - record.t_send if record.t_first_response is not None else None
    est_ppt = max(0.0, ttfr - latency_s) if ttfr is not None else None
    first = record.t_first_token
    times = rates.token_times(record, basis)
    chunks = record.chunk_times
    decode = times[-1] - times[0] if len(times) > 1 else None
    counted = rates.decode_tokens(times)
    return RequestFigures(
        ttfr_s=ttfr,
        est_ppt_s=est_ppt,
        e2e_ttft_s=first - record.t_send if first is not None else None,
        pp_tps=prompt / est_ppt if est_ppt else None,
        tg_tps=rates.request_rate(times),
        tg_chunks_tps=rates.request_rate(chunks),
        peak_tps=rates.peak_rate(times),
        peak_chunks_tps=rates.peak_rate(chunks),
        itl_s=decode / counted if decode and counted else None,
        e2e_s=record.t_end - record.t_send,
        prompt_tokens=prompt,
        completion_tokens=record.completion_tokens,
        content_chunks=len(chunks),
    )


@dataclass(frozen=True)
class BatchFigures:
    pp_tps: float | None
    tg_tps: float | None
    tg_chunks_tps: float | None
    peak_tps: float | None
    peak_chunks_tps: float | None


def batch_totals(
    records: Sequence[RequestRecord], expected_prompt_tokens: int, basis: TgBasis = "usage_tokens"
) -> BatchFigures:
    """The totals of one batch of concurrent requests (llama-benchy's batch rates)."""
    ok = [r for r in records if r.ok]
    if not ok:
        return BatchFigures(None, None, None, None, None)
    prompt = sum(prefill_tokens(r, expected_prompt_tokens) for r in ok)
    start = min(r.t_send for r in ok)
    pp_time = max(r.chunk_times[0] for r in ok) - start
    times = [rates.token_times(r, basis) for r in ok]
    chunks = [r.chunk_times for r in ok]
    return BatchFigures(
        pp_tps=prompt / pp_time if pp_time > 0 else None,
        tg_tps=rates.batch_rate(times),
        tg_chunks_tps=rates.batch_rate(chunks),
        peak_tps=rates.peak_rate([t for each in times for t in each]),
        peak_chunks_tps=rates.peak_rate([t for each in chunks for t in each]),
    )


def _values(items: Iterable[float | None], scale: float = 1.0) -> list[float]:
    return [v * scale for v in items if v is not None]


def expected_prompt(shape: Shape, *, prefix_cached: bool, context_phase: bool) -> int:
    """What a request's prefill should count (llama-benchy runner.py `BenchmarkRunner.run_suite`).

    The context load counts the depth, the prompt after it the prompt size,
    a plain request both.
    """
    if context_phase:
        return shape.depth
    return shape.pp if prefix_cached and shape.depth else shape.pp + shape.depth


def summarize(
    shape: Shape,
    batches: Sequence[Sequence[RequestRecord]],
    latency_s: float,
    basis: TgBasis = "usage_tokens",
    *,
    prefix_cached: bool = False,
    context_phase: bool = False,
) -> dict[str, Any]:
    """One `benchmarks[]` row in llama-benchy's shape, plus the chunk-counted figures, `itl`, `e2e_latency` and counts.

    `context_phase`: the row of the context loads of the prefix-cached mode
    (llama-benchy's `is_context_prefill_phase`, shown as ctx_pp and ctx_tg).
    """
    expected = expected_prompt(shape, prefix_cached=prefix_cached, context_phase=context_phase)
    records = [r for batch in batches for r in batch]
    figures = [request_figures(r, latency_s, expected, basis) for r in records if r.ok]
    row: dict[str, Any] = {
        "concurrency": shape.concurrency,
        "context_size": shape.depth,
        "prompt_size": shape.pp,
        "response_size": shape.tg,
        "is_context_prefill_phase": context_phase,
        "tg_basis": basis,
        "requests": len(records),
        "errors": sum(1 for r in records if not r.ok),
    }
    per_request = {
        "pp_req_throughput": _values(f.pp_tps for f in figures),
        "tg_req_throughput": _values(f.tg_tps for f in figures),
        "peak_req_throughput": _values(f.peak_tps for f in figures),
        "tg_req_throughput_chunks": _values(f.tg_chunks_tps for f in figures),
        "peak_req_throughput_chunks": _values(f.peak_chunks_tps for f in figures),
        "ttfr": _values((f.ttfr_s for f in figures), 1000),
        "est_ppt": _values((f.est_ppt_s for f in figures), 1000),
        "e2e_ttft": _values((f.e2e_ttft_s for f in figures), 1000),
        "itl": _values((f.itl_s for f in figures), 1000),
        "e2e_latency": _values((f.e2e_s for f in figures), 1000),
        "prompt_tokens": [float(f.prompt_tokens) for f in figures],
        "completion_tokens": _values(
            float(f.completion_tokens) if f.completion_tokens is not None else None for f in figures
        ),
        "content_chunks": [float(f.content_chunks) for f in figures],
        "tokens_per_chunk": _values(
            f.completion_tokens / f.content_chunks if f.completion_tokens is not None and f.content_chunks else None
            for f in figures
        ),
    }
    if shape.concurrency == 1:
        # One request per batch: its figures are the batch's (llama-benchy reports them as the totals).
        totals = {
            "pp_throughput": per_request["pp_req_throughput"],
            "tg_throughput": per_request["tg_req_throughput"],
            "peak_throughput": per_request["peak_req_throughput"],
            "tg_throughput_chunks": per_request["tg_req_throughput_chunks"],
            "peak_throughput_chunks": per_request["peak_req_throughput_chunks"],
        }
    else:
        each = [batch_totals(batch, expected, basis) for batch in batches]
        totals = {
            "pp_throughput": _values(b.pp_tps for b in each),
            "tg_throughput": _values(b.tg_tps for b in each),
            "peak_throughput": _values(b.peak_tps for b in each),
            "tg_throughput_chunks": _values(b.tg_chunks_tps for b in each),
            "peak_throughput_chunks": _values(b.peak_chunks_tps for b in each),
        }
    for name in (*THROUGHPUT_METRICS, *PEAK_METRICS, *CHUNK_METRICS, *LATENCY_METRICS, *COUNT_METRICS):
        values = totals.get(name, per_request.get(name, []))
        row[name] = stat(values) if values else None
    return row


RowKey = tuple[int, int, int, int, bool]


def row_key(row: Mapping[str, Any]) -> RowKey:
    """(prompt size, response size, depth, concurrency, context phase): how rows of two evidence files are matched.

    A row without `is_context_prefill_phase` (older evidence) is a measured row, not a context load.
    """
    return (
        int(row["prompt_size"]),
        int(row["response_size"]),
        int(row["context_size"]),
        int(row["concurrency"]),
        bool(row.get("is_context_prefill_phase", False)),
    )


def row_label(row: Mapping[str, Any]) -> str:
    pp, tg, depth, c, context_phase = row_key(row)
    return Shape(pp, tg, depth, c).label(context_phase)
