"""From timed requests to llama-benchy's figures: pp, tg, TTFR, est_ppt, TTFT.

Definitions (llama-benchy's, so Spark users can compare numbers):

- `ttfr`: time to first response, send -> first chunk carrying a choice (ms).
- `est_ppt`: estimated prompt processing time = max(0, ttfr - latency) (ms),
  where `latency` is measured once per run (`BenchClient.latency`): the
  time to the first chunk of a one-token request ("generation" mode: network,
  HTTP, scheduling and one decode step) or to a /v1/models answer ("api").
- `e2e_ttft`: send -> first chunk with generated content (ms).
- `pp_req_throughput`: prompt tokens / est_ppt, per request. Prompt tokens
  are the server's `usage.prompt_tokens` and include the depth (llama-benchy
  counts every prompt token the server processed: "pp2048 @ d4096" divides
  6144 tokens by the prefill time).
- `tg_req_throughput`: (n - 1) / (t_last - t_first), per request: the first
  token is excluded because its time belongs to prefill. t_last is the last
  content chunk (llama-benchy's per-request figure uses the end of the stream;
  the two differ by the usage chunk and `[DONE]`, microseconds).
- `pp_throughput`, `tg_throughput`: the batch totals. At concurrency 1 they
  are the per-request figures; above it, llama-benchy's batch rates:
  sum(prompt tokens) / (last first-token - first send) and
  (sum(n) - requests) / (last token - first first-token).
- Added here: `itl` = (t_last - t_first) / (n - 1) per request (ms) and
  `e2e_latency` = send -> end of stream (ms).

Every metric is `{mean, std, values}` with the population standard
deviation (numpy's default, which llama-benchy uses) over all measured
requests (or all batches, for totals). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.bench.client import RequestRecord

THROUGHPUT_METRICS = ("pp_throughput", "pp_req_throughput", "tg_throughput", "tg_req_throughput")
LATENCY_METRICS = ("ttfr", "est_ppt", "e2e_ttft", "itl", "e2e_latency")
HIGHER_IS_BETTER = frozenset(THROUGHPUT_METRICS)
UNITS = {
    **dict.fromkeys(THROUGHPUT_METRICS, "t/s"),
    **dict.fromkeys(LATENCY_METRICS, "ms"),
    "prompt_tokens": "tokens",
    "completion_tokens": "tokens",
}


@dataclass(frozen=True, order=True)
class Shape:
    """One grid point of a profile."""

    pp: int
    tg: int
    depth: int
    concurrency: int

    def label(self) -> str:
        depth = f" @ d{self.depth}" if self.depth else ""
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
    itl_s: float | None
    e2e_s: float
    prompt_tokens: int
    completion_tokens: int


def request_figures(record: RequestRecord, latency_s: float, expected_prompt_tokens: int) -> RequestFigures:
    """One request's figures; a figure that cannot be computed is None."""
    prompt = record.prompt_tokens if record.prompt_tokens is not None else expected_prompt_tokens
    n = record.tokens
    ttfr = record.t_first_response - record.t_send if record.t_first_response is not None else None
    est_ppt = max(0.0, ttfr - latency_s) if ttfr is not None else None
    first, last = record.t_first_token, record.t_last_token
    ttft = first - record.t_send if first is not None else None
    decode = last - first if first is not None and last is not None else None
    tg = (n - 1) / decode if decode and n > 1 else None
    itl = decode / (n - 1) if decode and n > 1 else None
    return RequestFigures(
        ttfr_s=ttfr,
        est_ppt_s=est_ppt,
        e2e_ttft_s=ttft,
        pp_tps=prompt / est_ppt if est_ppt else None,
        tg_tps=tg,
        itl_s=itl,
        e2e_s=record.t_end - record.t_send,
        prompt_tokens=prompt,
        completion_tokens=n,
    )


def batch_totals(records: Sequence[RequestRecord], expected_prompt_tokens: int) -> tuple[float | None, float | None]:
    """(pp, tg) totals of one batch of concurrent requests."""
    ok = [r for r in records if r.ok]
    if not ok:
        return None, None
    prompt = sum(r.prompt_tokens if r.prompt_tokens is not None else expected_prompt_tokens for r in ok)
    start = min(r.t_send for r in ok)
    firsts = [r.t_first_token for r in ok if r.t_first_token is not None]
    lasts = [r.t_last_token for r in ok if r.t_last_token is not None]
    pp_time = max(firsts) - start
    tg_time = max(lasts) - min(firsts)
    generated = sum(r.tokens for r in ok) - len(ok)
    pp = prompt / pp_time if pp_time > 0 else None
    tg = generated / tg_time if tg_time > 0 and generated > 0 else None
    return pp, tg


def _values(items: Iterable[float | None], scale: float = 1.0) -> list[float]:
    return [v * scale for v in items if v is not None]


def summarize(shape: Shape, batches: Sequence[Sequence[RequestRecord]], latency_s: float) -> dict[str, Any]:
    """One `benchmarks[]` row in llama-benchy's shape, plus `itl`, `e2e_latency` and counts."""
    expected = shape.pp + shape.depth
    records = [r for batch in batches for r in batch]
    figures = [request_figures(r, latency_s, expected) for r in records if r.ok]
    row: dict[str, Any] = {
        "concurrency": shape.concurrency,
        "context_size": shape.depth,
        "prompt_size": shape.pp,
        "response_size": shape.tg,
        "is_context_prefill_phase": False,
        "requests": len(records),
        "errors": sum(1 for r in records if not r.ok),
    }
    per_request = {
        "pp_req_throughput": _values(f.pp_tps for f in figures),
        "tg_req_throughput": _values(f.tg_tps for f in figures),
        "ttfr": _values((f.ttfr_s for f in figures), 1000),
        "est_ppt": _values((f.est_ppt_s for f in figures), 1000),
        "e2e_ttft": _values((f.e2e_ttft_s for f in figures), 1000),
        "itl": _values((f.itl_s for f in figures), 1000),
        "e2e_latency": _values((f.e2e_s for f in figures), 1000),
        "prompt_tokens": [float(f.prompt_tokens) for f in figures],
        "completion_tokens": [float(f.completion_tokens) for f in figures],
    }
    if shape.concurrency == 1:
        totals = {"pp_throughput": per_request["pp_req_throughput"], "tg_throughput": per_request["tg_req_throughput"]}
    else:
        pairs = [batch_totals(batch, expected) for batch in batches]
        totals = {"pp_throughput": _values(p for p, _ in pairs), "tg_throughput": _values(t for _, t in pairs)}
    for name in (*THROUGHPUT_METRICS, *LATENCY_METRICS, "prompt_tokens", "completion_tokens"):
        values = totals.get(name, per_request.get(name, []))
        row[name] = stat(values) if values else None
    return row


def row_key(row: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """(prompt size, response size, depth, concurrency): how rows of two evidence files are matched."""
    return (int(row["prompt_size"]), int(row["response_size"]), int(row["context_size"]), int(row["concurrency"]))


def row_label(row: Mapping[str, Any]) -> str:
    pp, tg, depth, c = row_key(row)
    return Shape(pp, tg, depth, c).label()
