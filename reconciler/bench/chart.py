"""An SVG chart of one evidence file: throughput and latency against the baseline.

People look before they read. Two panels (throughput: higher is better;
latency: lower is better), one row per grid point and metric, the baseline
bar in grey above this run's bar; this run's bar is red when the change is
beyond noise and worse, green when beyond noise and better, blue otherwise,
with a whisker of one standard deviation. Each row is scaled on its own
Each metric has its own scale (pp runs in thousands of t/s, tg in tens),
shared by its grid points and the baseline, and the numbers are printed: the
bars compare runs and grid points, never one metric with another.
Hand-written SVG text, no dependencies. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from xml.sax.saxutils import escape

from reconciler.bench.evidence import comparison_key, tg_basis
from reconciler.bench.metrics import ON_TG_BASIS, RowKey, row_key, row_label
from reconciler.bench.rates import BASIS_WORDS

PANELS = (
    ("Throughput (t/s, higher is better; tg in {basis})", ("pp_throughput", "tg_throughput")),
    ("Latency (ms, lower is better)", ("e2e_ttft", "itl", "e2e_latency")),
)
SHORT = {
    "pp_throughput": "pp",
    "tg_throughput": "tg",
    "e2e_ttft": "TTFT",
    "itl": "ITL",
    "e2e_latency": "e2e",
}
WIDTH = 980
LABEL_W = 250
BAR_X = LABEL_W + 10
BAR_W = 470
ROW_H = 34
BASE_COLOR = "#9aa0a6"
NOW_COLOR = "#1a73e8"
WORSE_COLOR = "#d93025"
BETTER_COLOR = "#188038"
FONT = "font-family:DejaVu Sans,Helvetica,Arial,sans-serif"


def _mean_std(row: Mapping[str, Any] | None, name: str) -> tuple[float, float] | None:
    value = row.get(name) if row is not None else None
    if not isinstance(value, Mapping) or not isinstance(value.get("mean"), int | float):
        return None
    std = value.get("std")
    return float(value["mean"]), float(std) if isinstance(std, int | float) else 0.0


def _fmt(value: float) -> str:
    if abs(value) >= 999.5:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 9.995 else f"{value:.2f}"


def _text(x: float, y: float, content: str, *, size: int = 12, anchor: str = "start", **attrs: str) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{escape(v)}"' for k, v in attrs.items())
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" style="{FONT}"{extra}>'
        f"{escape(content)}</text>"
    )


def render_svg(evidence: Mapping[str, Any], baseline: Mapping[str, Any] | None = None) -> str:
    """The chart of `evidence` against `baseline` (or the baseline means its comparison recorded)."""
    comparison = evidence.get("comparison") or None
    verdicts: dict[tuple[RowKey, str], str] = {}
    base_rows: dict[RowKey, dict[str, Any]] = {}
    for m in comparison.get("metrics", []) if comparison else []:
        key = comparison_key(m)
        verdicts[(key, m["metric"])] = m["verdict"]
        base_rows.setdefault(key, {})[m["metric"]] = {"mean": m["baseline"], "std": 0.0}
    if baseline is not None:
        base_rows = {row_key(r): dict(r) for r in baseline.get("benchmarks", [])}
        if tg_basis(baseline) != tg_basis(evidence):
            # A tg counted in other units is no bar to compare with (`evidence.compare` skips it too).
            base_rows = {k: {n: v for n, v in r.items() if n not in ON_TG_BASIS} for k, r in base_rows.items()}
    basis = BASIS_WORDS[tg_basis(evidence)]

    parts: list[str] = []
    y = 28.0
    title = f"{evidence.get('lane', '?')} · {str(evidence.get('commit', ''))[:12]} · {evidence.get('time', '')}"
    parts.append(_text(16, y, title, size=16, font_weight="bold"))
    y += 20
    engine = f"{evidence.get('engine', '')} {evidence.get('engine_version', '')}".strip()
    subtitle = f"{engine} · {evidence.get('model', '')} · hosts {', '.join(evidence.get('hosts', []))}"
    parts.append(_text(16, y, subtitle, size=12, fill="#444"))
    y += 20
    if comparison:
        base = comparison.get("baseline", {})
        verdict = "REGRESSION" if comparison.get("regression") else "no regression beyond noise"
        legend = (
            f"baseline {str(base.get('commit') or '')[:12]} {base.get('time') or ''} (grey) vs this run · {verdict}"
        )
        parts.append(_text(16, y, legend, size=12, fill=WORSE_COLOR if comparison.get("regression") else "#444"))
    else:
        parts.append(_text(16, y, "no baseline: this run only", size=12, fill="#444"))
    y += 14

    for panel_title, names in PANELS:
        items = []
        for row in evidence.get("benchmarks", []):
            key = row_key(row)
            for name in names:
                now = _mean_std(row, name)
                if now is not None:
                    items.append(
                        (name, row, now, _mean_std(base_rows.get(key), name), verdicts.get((key, name), "same"))
                    )
        # One scale per metric: grid points and the baseline compare at a glance.
        tops: dict[str, float] = {}
        for name, _, now, then, _ in items:
            top = max(now[0] + now[1], (then[0] + then[1]) if then else 0.0)
            tops[name] = max(tops.get(name, 1e-9), top)
        y += 22
        # What tg counts goes in the panel's title: the row labels have no room for it.
        parts.append(_text(16, y, panel_title.format(basis=basis), size=14, font_weight="bold"))
        y += 8
        for name, row, now, then, verdict in items:
            parts += _bar_row(y, f"{SHORT[name]}  {row_label(row)}", now, then, verdict, tops[name])
            y += ROW_H
    height = int(y + 16)
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img">'
    )
    background = f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>'
    return "\n".join([head, f"<title>{escape(title)}</title>", background, *parts, "</svg>"]) + "\n"


def _bar_row(
    y: float, label: str, now: tuple[float, float], then: tuple[float, float] | None, verdict: str, top: float
) -> list[str]:
    scale = BAR_W / (top * 1.05)
    color = {"worse": WORSE_COLOR, "better": BETTER_COLOR}.get(verdict, NOW_COLOR)
    out = [_text(16, y + 21, label, size=12)]
    bar_y = y + 6
    if then is not None:
        out.append(
            f'<rect x="{BAR_X}" y="{bar_y:.1f}" width="{max(then[0] * scale, 1):.1f}" height="10" fill="{BASE_COLOR}"/>'
        )
        bar_y += 12
    else:
        bar_y += 6
    width = max(now[0] * scale, 1)
    out.append(f'<rect x="{BAR_X}" y="{bar_y:.1f}" width="{width:.1f}" height="10" fill="{color}"/>')
    if now[1] > 0:
        lo, hi = BAR_X + (now[0] - now[1]) * scale, BAR_X + (now[0] + now[1]) * scale
        mid = bar_y + 5
        out.append(
            f'<path d="M{max(lo, BAR_X):.1f} {mid:.1f} H{hi:.1f} M{max(lo, BAR_X):.1f} {mid - 4:.1f} '
            f'V{mid + 4:.1f} M{hi:.1f} {mid - 4:.1f} V{mid + 4:.1f}" stroke="#202124" stroke-width="1" fill="none"/>'
        )
    value = _fmt(now[0])
    if then is not None:
        change = (now[0] - then[0]) / then[0] if then[0] else 0.0
        value += f"  (base {_fmt(then[0])}, {change:+.1%})"
    out.append(_text(BAR_X + BAR_W + 10, y + 21, value, size=12, fill=color if verdict != "same" else "#202124"))
    return out
