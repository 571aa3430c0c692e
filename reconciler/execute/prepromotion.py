"""Blue/green's pre-promotion analysis: the same short benchmark against the old head and the new one.

Before the route moves, both specs run, each on its own Sparks, so they are measured side by side, under the
same conditions, with lanes' own benchmark (`reconciler.bench.runner.run_profile`, llama-benchy's figures):
a short grid (one 64-token prompt, 16 tokens out, one request at a time, a warmup and two measured runs). The
new spec fails the analysis when its decode rate falls, or its time to first token grows, by more than the
allowed share (`Analysis.max_slowdown`) against the old one, or when it cannot answer the benchmark at all.

Side by side rather than against the old lane's committed evidence: that evidence was measured on another day,
under another load, often with a longer grid; a comparison at the same moment on the same kind of host says
whether the new spec is slower, which is what promotion must know. (The evidence commit after the rollout
still compares with the lane's committed history.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reconciler.bench.runner import run_profile
from reconciler.errors import LanesError
from reconciler.spec.bench import BenchProfile

PROFILE = BenchProfile(
    name="pre-promotion",
    description="blue/green's side-by-side check before the route moves",
    pp=(64,),
    tg=(16,),
    repetitions=2,
    warmup=1,
    latency_mode="none",
    request_timeout_s=30.0,
)
"""Short on purpose: it runs while two copies of the lane hold their Sparks, and it delays the promotion."""
TTFT_SLACK_MS = 100.0
"""A first token later by less than this is never a slowdown (a loaded control node, a busy network)."""


@dataclass(frozen=True)
class Figures:
    tg_tps: float
    """Mean output tokens per second of one request."""
    ttft_ms: float
    """Mean time to the first generated token (ms)."""


@dataclass(frozen=True)
class Verdict:
    ok: bool
    old: Figures | None
    new: Figures | None
    why: str

    def to_timings(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for side, figures in (("old", self.old), ("new", self.new)):
            if figures is not None:
                out[f"pre_{side}_tg_tps"] = round(figures.tg_tps, 2)
                out[f"pre_{side}_ttft_ms"] = round(figures.ttft_ms, 1)
        return out


def _mean(rows: list[dict[str, Any]], metric: str) -> float | None:
    values = [row[metric]["mean"] for row in rows if not row.get("is_context_prefill_phase") and metric in row]
    values = [v for v in values if isinstance(v, int | float)]
    return sum(values) / len(values) if values else None


async def measure(url: str, model: str, profile: BenchProfile = PROFILE) -> Figures:
    run = await run_profile(profile, url=url, model=model)
    tg, ttft = _mean(run.rows, "tg_req_throughput"), _mean(run.rows, "e2e_ttft")
    if tg is None or ttft is None:
        raise LanesError(f"{url}: the benchmark measured no output tokens")
    return Figures(tg, ttft)


async def compare(old_url: str, new_url: str, model: str, max_slowdown: float) -> Verdict:
    """Measure the old head, then the new one; the new one passes unless slower beyond `max_slowdown`."""
    try:
        old = await measure(old_url, model)
    except (LanesError, OSError) as exc:
        # The old spec not answering is no reason to keep the new one out: promotion is judged on the new alone.
        return Verdict(True, None, None, f"the old head could not be measured ({exc}); not compared")
    try:
        new = await measure(new_url, model)
    except (LanesError, OSError) as exc:
        return Verdict(False, old, None, f"the new spec did not answer the pre-promotion benchmark: {exc}")
    slower = 1 - new.tg_tps / old.tg_tps if old.tg_tps > 0 else 0.0
    # A first token a few milliseconds later is noise, however large as a share of a fast one.
    later = new.ttft_ms / old.ttft_ms - 1 if old.ttft_ms > 0 and new.ttft_ms - old.ttft_ms > TTFT_SLACK_MS else 0.0
    said = (
        f"decode {new.tg_tps:.1f} tokens/s against the old {old.tg_tps:.1f}, "
        f"first token {new.ttft_ms:.0f} ms against {old.ttft_ms:.0f} ms"
    )
    if slower > max_slowdown or later > max_slowdown:
        return Verdict(False, old, new, f"the new spec is slower than the old one ({said}; {max_slowdown:.0%} allowed)")
    return Verdict(True, old, new, said)
