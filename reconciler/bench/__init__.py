"""bench: measure a lane's endpoint (pp, tg, TTFT, ITL) and keep the numbers as evidence.

Effects layer: streams requests with httpx; `prompts`, `metrics`, `evidence`
and `chart` are pure. Entry point for the CLI and the daemon:
`benchmark_lane` (service), then `evidence.dumps` / `evidence_path` /
`trailers` and `chart.render_svg` to write and commit the result.
"""

from reconciler.bench.chart import render_svg
from reconciler.bench.evidence import LaneIdentity, build_evidence, compare, evidence_path, headline, latest, trailers
from reconciler.bench.runner import BenchRun, Progress, run_profile
from reconciler.bench.service import benchmark_lane, lane_url, resolve_profile

__all__ = [
    "BenchRun",
    "LaneIdentity",
    "Progress",
    "benchmark_lane",
    "build_evidence",
    "compare",
    "evidence_path",
    "headline",
    "lane_url",
    "latest",
    "render_svg",
    "resolve_profile",
    "run_profile",
    "trailers",
]
