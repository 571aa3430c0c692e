"""Evidence: a benchmark run as JSON in llama-benchy's shape, tied to what was measured.

The body is llama-benchy's report (`version`, `timestamp`, `latency_mode`,
`latency_ms`, `model`, `prefix_caching_enabled`, `max_concurrency` and
`benchmarks[]` with `{mean, std, values}` per metric), so tools that read
llama-benchy JSON read ours. Around it: which lane, commit, engine, image
digest and hosts were measured, the profile, how prompts were sized, and a
comparison with a previous evidence file of the lane.

Comparison rule (per row matched on prompt size, response size, depth and
concurrency, per metric present in both): delta = current mean - baseline
mean; it is *beyond noise* when |delta| > k x sqrt(std_now^2 + std_base^2)
and |delta| / |baseline mean| > min_relative (the profile's `noise`, by
default k = 2 and 3%). The evidence is a *regression* when any throughput
metric (pp or tg, total or per request) dropped beyond noise; the peak and
chunk-counted figures and latencies that moved beyond noise are listed as
better or worse but do not by themselves make one.

What "tg" counts is said in `tg_basis` (top level and per row):
`usage_tokens` (the server's `usage.completion_tokens`) or `stream_chunks`
(content chunks, what llama-benchy 0.3 counted); the `_chunks` figures
always count chunks (`rates`). Figures on the tg basis are compared only
between two runs of one basis. An evidence file written before `tg_basis`
was recorded counted usage tokens whenever the server reported them (every
vLLM and SGLang stream asked for them does), so it reads as `usage_tokens`;
its rows without `is_context_prefill_phase` are measured rows.
Pure: files are read and written by the caller.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from reconciler import __version__
from reconciler.bench.metrics import (
    CHUNK_METRICS,
    HIGHER_IS_BETTER,
    LATENCY_METRICS,
    ON_TG_BASIS,
    PEAK_METRICS,
    THROUGHPUT_METRICS,
    RowKey,
    row_key,
    row_label,
)
from reconciler.bench.rates import BASIS_WORDS, TgBasis
from reconciler.bench.runner import BenchRun
from reconciler.errors import InputError
from reconciler.spec.bench import NoiseRule
from reconciler.spec.lane import Lane

SCHEMA = "lanes.evidence/1"
COMPARED = (*THROUGHPUT_METRICS, *PEAK_METRICS, *CHUNK_METRICS, *LATENCY_METRICS)
DEFAULT_BASIS: TgBasis = "usage_tokens"
"""The basis of evidence that does not say (see the module's docstring)."""
DIGEST_RE = re.compile(r"@(sha256:[0-9a-f]{64})$")


@dataclass(frozen=True)
class LaneIdentity:
    """What was measured: recorded in the evidence so a number is never orphaned."""

    lane: str
    commit: str
    engine: str
    engine_version: str
    image: str
    hosts: tuple[str, ...]

    @property
    def image_digest(self) -> str | None:
        found = DIGEST_RE.search(self.image)
        return found.group(1) if found else None

    @classmethod
    def of(cls, lane: Lane, commit: str) -> LaneIdentity:
        return cls(
            lane=lane.name,
            commit=commit,
            engine=lane.engine,
            engine_version=lane.engine_version,
            image=lane.image,
            hosts=tuple(lane.hosts),
        )


def _utc(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_evidence(
    run: BenchRun, identity: LaneIdentity, *, baseline: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The evidence dict of a run; with a baseline, its comparison and regression flag."""
    profile = run.profile
    evidence: dict[str, Any] = {
        # llama-benchy's report fields first, in its order.
        "version": __version__,
        "timestamp": _utc(run.started),
        "latency_mode": profile.latency_mode,
        "latency_ms": run.latency_s * 1000,
        "model": run.model,
        "prefix_caching_enabled": profile.prefix_cached,
        "max_concurrency": max(profile.concurrency),
        "benchmarks": run.rows,
        # What was measured.
        "schema": SCHEMA,
        "tg_basis": run.tg_basis,
        "tool": f"lanes bench {__version__}",
        "lane": identity.lane,
        "commit": identity.commit,
        "engine": identity.engine,
        "engine_version": identity.engine_version,
        "engine_reported_version": run.server_version,
        "image": identity.image,
        "image_digest": identity.image_digest,
        "hosts": list(identity.hosts),
        "url": run.url,
        "time": _utc(run.finished),
        "duration_s": round((run.finished - run.started).total_seconds(), 3),
        "profile": profile.model_dump(mode="json"),
        "prompt_sizing": {
            "api": profile.api,
            "tokens_per_word": run.fit.per_word,
            "fixed_tokens": run.fit.fixed,
            "run_prefix": " ".join(run.prefix),
            "sized": [
                {
                    "prompt_size": pp,
                    "context_size": depth,
                    "words": words,
                    "server_tokens": run.sized_tokens[(pp, depth)],
                }
                for (pp, depth), words in sorted(run.sized_words.items())
            ],
        },
        "comparison": None,
        "regression": False,
    }
    if baseline is not None:
        comparison = compare(evidence, baseline, profile.noise)
        evidence["comparison"] = comparison
        evidence["regression"] = comparison["regression"]
    return evidence


def _metric(row: Mapping[str, Any], name: str) -> tuple[float, float] | None:
    value = row.get(name)
    if not isinstance(value, Mapping) or not isinstance(value.get("mean"), int | float):
        return None
    std = value.get("std")
    return float(value["mean"]), float(std) if isinstance(std, int | float) else 0.0


def tg_basis(evidence: Mapping[str, Any]) -> TgBasis:
    """What the headline tg of an evidence file counts (files from before it was recorded: usage tokens)."""
    return "stream_chunks" if evidence.get("tg_basis") == "stream_chunks" else DEFAULT_BASIS


def comparison_key(m: Mapping[str, Any]) -> RowKey:
    """The row a comparison entry belongs to, as `row_key` names it."""
    return (
        int(m["prompt_size"]),
        int(m["response_size"]),
        int(m["context_size"]),
        int(m["concurrency"]),
        bool(m.get("context_phase", False)),
    )


def compare(current: Mapping[str, Any], baseline: Mapping[str, Any], rule: NoiseRule) -> dict[str, Any]:
    """Per-metric deltas of `current` against `baseline` and whether each is beyond noise."""
    base_rows = {row_key(r): r for r in baseline.get("benchmarks", []) if isinstance(r, Mapping)}
    bases = {"current": tg_basis(current), "baseline": tg_basis(baseline)}
    # A tg of chunks against a tg of tokens differs by the tokens per chunk, not by speed.
    names = [n for n in COMPARED if bases["current"] == bases["baseline"] or n not in ON_TG_BASIS]
    metrics: list[dict[str, Any]] = []
    for row in current.get("benchmarks", []):
        key = row_key(row)
        base = base_rows.get(key)
        if base is None:
            continue
        for name in names:
            now, then = _metric(row, name), _metric(base, name)
            if now is None or then is None:
                continue
            delta = now[0] - then[0]
            noise = rule.k * math.hypot(now[1], then[1])
            relative = delta / abs(then[0]) if then[0] else None
            beyond = abs(delta) > noise and (relative is None or abs(relative) > rule.min_relative)
            better = delta > 0 if name in HIGHER_IS_BETTER else delta < 0
            metrics.append(
                {
                    "shape": row_label(row),
                    "prompt_size": key[0],
                    "response_size": key[1],
                    "context_size": key[2],
                    "concurrency": key[3],
                    "context_phase": key[4],
                    "metric": name,
                    "baseline": then[0],
                    "current": now[0],
                    "delta": delta,
                    "relative": relative,
                    "noise": noise,
                    "beyond_noise": beyond,
                    "verdict": ("better" if better else "worse") if beyond else "same",
                }
            )
    regressions = [m for m in metrics if m["verdict"] == "worse" and m["metric"] in THROUGHPUT_METRICS]
    return {
        "baseline": {
            "commit": baseline.get("commit"),
            "time": baseline.get("time"),
            "engine_version": baseline.get("engine_version"),
            "image_digest": baseline.get("image_digest"),
        },
        "rule": {"k": rule.k, "min_relative": rule.min_relative},
        "tg_basis": bases,
        "matched_rows": len({comparison_key(m) for m in metrics}),
        "metrics": metrics,
        "regression": bool(regressions),
        "regressions": [_describe(m) for m in regressions],
        "improvements": [
            _describe(m) for m in metrics if m["verdict"] == "better" and m["metric"] in THROUGHPUT_METRICS
        ],
    }


def _describe(m: Mapping[str, Any]) -> str:
    change = f"{m['relative']:+.1%}" if m["relative"] is not None else f"{m['delta']:+.3g}"
    return f"{m['metric']} {m['shape']}: {change}"


def headline(evidence: Mapping[str, Any]) -> dict[str, str]:
    """One pp and one tg figure for commit trailers and status lines, the tg saying what it counts.

    From the first measured row at concurrency 1 and the lowest depth (the
    llama-bench figure people quote), e.g. {"pp": "pp2048 1994.5 t/s",
    "tg": "tg128 52.9 t/s (usage tokens)"}.
    """
    rows = [
        r for r in evidence.get("benchmarks", []) if isinstance(r, Mapping) and not r.get("is_context_prefill_phase")
    ]
    if not rows:
        return {}
    row = min(rows, key=lambda r: (int(r["concurrency"]), int(r["context_size"]), int(r["prompt_size"])))
    out: dict[str, str] = {}
    suffix = f" @ d{row['context_size']}" if row["context_size"] else ""
    suffix += f" c{row['concurrency']}" if row["concurrency"] != 1 else ""
    pp, tg = _metric(row, "pp_throughput"), _metric(row, "tg_throughput")
    if pp is not None:
        out["pp"] = f"pp{row['prompt_size']}{suffix} {pp[0]:.1f} t/s"
    if tg is not None:
        out["tg"] = f"tg{row['response_size']}{suffix} {tg[0]:.1f} t/s ({BASIS_WORDS[tg_basis(evidence)]})"
    return out


def trailers(evidence: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Commit trailers for an evidence commit: Lane, Evidence-For, pp, tg (and Regression when flagged)."""
    out = [("Lane", str(evidence["lane"])), ("Evidence-For", str(evidence["commit"]))]
    out += sorted(headline(evidence).items())
    if evidence.get("regression"):
        out.append(("Regression", "; ".join(evidence["comparison"]["regressions"][:3])))
    return out


def evidence_path(evidence: Mapping[str, Any], folder: str = "evidence") -> str:
    """`evidence/<lane>/<utc>-<sha>.json`; names sort by time, so the newest is the last."""
    when = datetime.strptime(str(evidence["time"]), "%Y-%m-%dT%H:%M:%SZ")
    return f"{folder}/{evidence['lane']}/{when:%Y%m%dT%H%M%SZ}-{str(evidence['commit'])[:12]}.json"


def latest(paths: Sequence[str], lane: str, folder: str = "evidence") -> str | None:
    """The newest evidence file of `lane` among repository paths (the baseline for the next run)."""
    prefix = f"{folder}/{lane}/"
    mine = sorted(p for p in paths if p.startswith(prefix) and p.endswith(".json") and "/" not in p[len(prefix) :])
    return mine[-1] if mine else None


def dumps(evidence: Mapping[str, Any]) -> str:
    return json.dumps(evidence, indent=2) + "\n"


def loads(text: str | bytes, source: str = "evidence") -> dict[str, Any]:
    """Parse an evidence (or llama-benchy) JSON file; the shape is checked, not trusted."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InputError(f"not JSON: {exc}", file=source) from None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise InputError("not an evidence file: no 'benchmarks' list", file=source)
    for i, row in enumerate(data["benchmarks"]):
        if not isinstance(row, dict):
            raise InputError("a benchmark row is not an object", file=source, field=f"benchmarks[{i}]")
        for key in ("prompt_size", "response_size", "context_size", "concurrency"):
            if not isinstance(row.get(key), int):
                raise InputError(f"missing integer '{key}'", file=source, field=f"benchmarks[{i}].{key}")
    return data
