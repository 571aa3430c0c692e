"""A lane's evidence over commits: pp, tg and TTFT of each evidence file, one small bar chart per metric.

`reconciler.bench.chart` draws one evidence file against its baseline; this
draws the headline figures of every evidence file of a lane side by side, so a
drift over several commits shows. The row is the one `bench.evidence.headline`
quotes (the first measured row at concurrency 1 and the lowest depth), and each
metric has its own scale. Hand-written SVG; every text escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reconciler.dashboard.page import e

METRICS = (
    ("pp_throughput", "pp", "t/s, higher is better"),
    ("tg_throughput", "tg", "t/s, higher is better"),
    ("e2e_ttft", "TTFT", "ms, lower is better"),
)
WIDTH = 640
PANEL_H = 120
BAR_TOP = 26
BAR_H = 64
COLOR = "#1a73e8"
WORSE = "#d93025"


def headline_row(evidence: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The row `bench.evidence.headline` quotes: measured, lowest concurrency, depth and prompt."""
    rows = [
        r for r in evidence.get("benchmarks", []) if isinstance(r, Mapping) and not r.get("is_context_prefill_phase")
    ]
    if not rows:
        return None
    return min(rows, key=lambda r: (int(r["concurrency"]), int(r["context_size"]), int(r["prompt_size"])))


def mean_of(row: Mapping[str, Any] | None, metric: str) -> float | None:
    value = row.get(metric) if row is not None else None
    if isinstance(value, Mapping) and isinstance(value.get("mean"), int | float):
        return float(value["mean"])
    return None


def points(evidence: Sequence[Mapping[str, Any]]) -> dict[str, list[tuple[str, float | None, bool]]]:
    """metric -> [(commit, mean, regression flagged)] in the order given (oldest first)."""
    out: dict[str, list[tuple[str, float | None, bool]]] = {m: [] for m, _, _ in METRICS}
    for ev in evidence:
        row = headline_row(ev)
        for metric, _, _ in METRICS:
            out[metric].append((str(ev.get("commit") or "")[:12], mean_of(row, metric), bool(ev.get("regression"))))
    return out


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"


def render_trend(lane: str, evidence: Sequence[Mapping[str, Any]]) -> str:
    """The SVG of `evidence` (oldest first); an empty string when there is none."""
    if not evidence:
        return ""
    series = points(evidence)
    n = len(evidence)
    slot = (WIDTH - 20) / n
    bar_w = max(min(slot * 0.6, 60.0), 2.0)
    parts: list[str] = []
    y0 = 0.0
    for metric, short, unit in METRICS:
        values = series[metric]
        top = max((v for _, v, _ in values if v is not None), default=0.0) or 1.0
        parts.append(f'<text x="10" y="{y0 + 16:.0f}" font-size="13" font-weight="bold">{e(short)} ({e(unit)})</text>')
        for i, (commit, value, regressed) in enumerate(values):
            x = 10 + i * slot + (slot - bar_w) / 2
            base = y0 + BAR_TOP + BAR_H
            if value is None:
                parts.append(f'<text x="{x:.1f}" y="{base:.1f}" font-size="11">n/a</text>')
            else:
                h = max(BAR_H * value / top, 1.0)
                color = WORSE if regressed else COLOR
                parts.append(
                    f'<rect x="{x:.1f}" y="{base - h:.1f}" width="{bar_w:.1f}" height="{h:.1f}" fill="{color}">'
                    f"<title>{e(short)} {e(_fmt(value))} at {e(commit)}</title></rect>"
                )
                parts.append(
                    f'<text x="{x + bar_w / 2:.1f}" y="{base - h - 3:.1f}" font-size="11" '
                    f'text-anchor="middle">{e(_fmt(value))}</text>'
                )
            parts.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{base + 14:.1f}" font-size="10" text-anchor="middle" '
                f'fill="#5f6368">{e(commit[:7])}</text>'
            )
        y0 += PANEL_H
    height = int(y0 + 4)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
        f'role="img" aria-label="{e(lane)}: pp, tg and TTFT over {n} evidence files" '
        'style="font-family:system-ui,sans-serif;background:#fff">'
        f"<title>{e(lane)} evidence over commits</title>{''.join(parts)}</svg>"
    )
