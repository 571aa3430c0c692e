"""The pages as markup: values redacted before they are escaped, bars drawn from the check payload's
figures, what a lane waits for, and the evidence trend's figures; each expectation worked out by hand."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from reconciler.dashboard.overview import lanes_panel, memory_panel, rank_bar
from reconciler.dashboard.page import e, page
from reconciler.dashboard.snapshot import Snapshot
from reconciler.dashboard.trend import BAR_H, points, render_trend
from reconciler.logsetup import forget_secrets, remember_secrets
from tests.dashboard.dom import parse

pytestmark = pytest.mark.timeout(10)
GIB = 1 << 30


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    forget_secrets()
    yield
    forget_secrets()


def test_a_value_is_redacted_before_it_is_escaped() -> None:
    remember_secrets(["tok&<en>42"])  # escaped first, '&amp;&lt;' would no longer match the secret
    out = e('id "tok&<en>42" <script>')
    assert out == "id &quot;[redacted]&quot; &lt;script&gt;"
    doc = parse(page("t", f"<p>{e('<img src=x onerror=alert(1)>')}</p>"))
    assert not doc.find_all("img") and not doc.find_all("script")


def test_the_whole_page_is_redacted_once_more() -> None:
    remember_secrets(["plainsecret99"])
    assert "plainsecret99" not in page("t", "<p>plainsecret99</p>")  # markup built without e()


def rank(**figures: Any) -> dict[str, Any]:
    base = {
        "lane": "a",
        "rank": 0,
        "host": "dgx1",
        "flag": "--gpu-memory-utilization",
        "utilization": 0.75,
        "weights": 64 * GIB,
        "kv_min": 16 * GIB,
        "drafter": 0,
        "overhead": 8 * GIB,
        "need": 88 * GIB,
        "budget": 96 * GIB,
        "headroom": 8 * GIB,
        "pool": 24 * GIB,
        "context": 131072,
        "capacity": 128 * GIB,
        "floor": False,
    }
    return {**base, **figures}


def test_a_rank_bar_is_on_the_scale_of_the_hosts_memory_with_the_budget_marked() -> None:
    bar = parse(rank_bar(rank())).one("div")
    widths = {s.attrs["class"]: s.attrs["style"] for s in bar.find_all("span")}
    # 64, 16 and 8 GiB of 128 GiB; no drafter, so no segment; the budget at 96 of 128.
    assert widths == {"weights": "width:50.00%", "kv": "width:12.50%", "overhead": "width:6.25%"}
    assert bar.one("i").attrs["style"] == "left:75.00%"
    assert bar.attrs["aria-label"] == (
        "weights 64.0 GiB, KV 16.0 GiB, drafter 0.0 GiB, overhead 8.0 GiB; budget 96.0 GiB"
    )


def test_a_rank_that_needs_more_than_the_host_has_is_drawn_to_its_need() -> None:
    bar = parse(rank_bar(rank(weights=120 * GIB, kv_min=20 * GIB, need=160 * GIB, headroom=-64 * GIB))).one("div")
    widths = {s.attrs["class"]: s.attrs["style"] for s in bar.find_all("span")}
    assert widths["weights"] == "width:81.08%"  # 120 of 148 (120 + 20 + 8) GiB, the larger than 128
    doc = parse(memory_panel({"budgets": {"a": {"ranks": [rank(headroom=-64 * GIB)]}}}))
    assert doc.one("span", class_="bad").text == "-64.0 GiB"


def test_what_a_lane_waits_for() -> None:
    row = {
        "name": "x",
        "health": "healthy",
        "desired": "running",
        "hosts": ["dgx1"],
        "suspended": True,
        "held_until": "2026-12-01T22:00:00Z",
        "last_error": "<b>boom</b>",
        "staging": {"model": "m", "hosts": {"dgx1": {"done": 1 << 30, "total": 2 << 30, "rate_bps": 4e8, "eta_s": 3}}},
    }
    snap = Snapshot("idle", "me", None, [row], blocked={"x": "host dgx1 leased by lanes@other"}, retry_at={"x": 0.0})
    cells = parse(lanes_panel(snap)).rows()[0]
    assert cells[5] == (
        "suspended: the daemon leaves what runs alone "
        "staging model m: dgx1 1.0/2.0 GiB at 400 MB/s, 3 s left (before its old ranks stop) "
        "held until 2026-12-01T22:00:00Z by a change window (lanes apply --now applies it at once) "
        "blocked: host dgx1 leased by lanes@other "
        "retry after 1970-01-01T00:00:00Z (backoff)"
    )
    assert cells[6] == "<b>boom</b>"  # shown as text, not markup


def evidence(commit: str, pp: float, tg: float, ttft: float, *, regression: bool = False) -> dict[str, Any]:
    def row(concurrency: int, depth: int, scale: float) -> dict[str, Any]:
        return {
            "prompt_size": 512,
            "response_size": 32,
            "context_size": depth,
            "concurrency": concurrency,
            "pp_throughput": {"mean": pp * scale},
            "tg_throughput": {"mean": tg * scale},
            "e2e_ttft": {"mean": ttft * scale},
        }

    # The headline row is concurrency 1 at the lowest depth; the others must not be picked.
    rows = [row(4, 0, 10.0), row(1, 4096, 3.0), row(1, 0, 1.0)]
    return {"commit": commit, "benchmarks": rows, "regression": regression}


def test_the_trend_takes_each_files_headline_row_and_scales_each_metric_on_its_own() -> None:
    files = [evidence("a" * 40, 4000.0, 60.0, 130.0), evidence("b" * 40, 2000.0, 30.0, 260.0, regression=True)]
    assert points(files)["tg_throughput"] == [("a" * 12, 60.0, False), ("b" * 12, 30.0, True)]
    assert points(files)["e2e_ttft"] == [("a" * 12, 130.0, False), ("b" * 12, 260.0, True)]
    svg = parse(render_trend("lane", files))
    heights = [float(r.attrs["height"]) for r in svg.find_all("rect")]
    # pp: 4000 is the top, 2000 half of it; tg likewise; TTFT: 260 the top, 130 half.
    assert heights == [BAR_H, BAR_H / 2, BAR_H, BAR_H / 2, BAR_H / 2, BAR_H]
    colors = [r.attrs["fill"] for r in svg.find_all("rect")]
    assert colors[1] == colors[3] == "#d93025" and colors[0] == "#1a73e8"  # the flagged file in red
    assert render_trend("lane", []) == ""
