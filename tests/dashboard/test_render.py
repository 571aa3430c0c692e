"""The pages as markup: values redacted before they are escaped, bars drawn from the check payload's
figures, what a lane waits for, and the evidence trend's figures; each expectation worked out by hand."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from reconciler.dashboard.lanepage import LaneData, history_panel
from reconciler.dashboard.overview import lanes_panel, memory_panel, rank_bar
from reconciler.dashboard.page import REFRESH_S, e, page
from reconciler.dashboard.snapshot import Snapshot
from reconciler.dashboard.trend import BAR_H, points, render_trend
from reconciler.logsetup import forget_secrets, remember_secrets
from reconciler.source.history import LaneChange
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


def test_sglangs_overhead_is_drawn_beyond_its_static_budget_not_inside_it() -> None:
    """SGLang: budget = mem_fraction_static x free at boot holds weights + KV; the overhead lives in the rest."""
    figures = rank(flag="--mem-fraction-static", budget=90 * GIB, need=80 * GIB, overhead_inside_budget=False)
    bar = parse(rank_bar(figures)).one("div")
    spans = [(s.attrs["class"], s.attrs["style"]) for s in bar.find_all("span")]
    # 64 + 16 GiB up to the budget line at 90 GiB (a 10 GiB gap: the pool's room), then the 8 GiB overhead.
    assert spans == [
        ("weights", "width:50.00%"),
        ("kv", "width:12.50%"),
        ("gap", "width:7.81%"),
        ("overhead", "width:6.25%"),
    ]
    assert bar.one("i").attrs["style"] == "left:70.31%"
    assert "overhead 8.0 GiB outside the static budget; budget 90.0 GiB" in bar.attrs["aria-label"]


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
    blocked = {"x": "host dgx1 leased by lanes@other"}
    snap = Snapshot("idle", "me", None, [row], blocked=blocked, retry_at={"x": 100.0}, now=50.0)
    cells = parse(lanes_panel(snap)).rows()[0]
    assert cells[5] == (
        "suspended: the daemon leaves what runs alone "
        "staging model m: dgx1 1.0/2.0 GiB at 400 MB/s, 3 s left (before its old ranks stop) "
        "held until 2026-12-01T22:00:00Z by a change window (lanes apply --now applies it at once) "
        "blocked: host dgx1 leased by lanes@other "
        "retry after 1970-01-01T00:01:40Z (backoff)"
    )
    assert cells[6] == "<b>boom</b>"  # shown as text, not markup


def test_no_stale_backoff_and_the_engines_words_and_who_suspended() -> None:
    """A lane healthy at its wanted commit shows no backoff; one whose backoff ended says it is due, not a past
    time; the last error carries the engine's own words; a runtime hold names who and why."""
    base = {"name": "x", "desired": "running", "hosts": ["dgx1"], "commit": "a" * 40, "desired_commit": "a" * 40}
    healthy = {**base, "health": "healthy"}
    snap = Snapshot("idle", "me", None, [healthy], retry_at={"x": 100.0}, now=500.0)
    assert parse(lanes_panel(snap)).rows()[0][5] == "nothing"
    failed = {
        **base,
        "health": "failed",
        "last_error": "a rank exited while waiting for port",
        "engine_error": "vllm: error: unrecognized arguments: --enable-prefix-cachng",
        "suspension": {"by": "alice", "reason": "NIC swap", "at": "2026-12-02T03:00:00Z"},
        "suspended": True,
    }
    cells = parse(lanes_panel(Snapshot("idle", "me", None, [failed], retry_at={"x": 100.0}, now=500.0))).rows()[0]
    assert cells[5] == (
        "suspended by alice at 2026-12-02T03:00:00Z: NIC swap (lanes resume x) "
        "retry due (backoff over; the next cycle tries it)"
    )
    assert cells[6] == (
        "a rank exited while waiting for port; engine: vllm: error: unrecognized arguments: --enable-prefix-cachng"
    )


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


def test_every_page_refreshes_itself() -> None:
    doc = parse(page("t", "<p>x</p>"))
    assert doc.one("meta", **{"http-equiv": "refresh"}).attrs["content"] == str(REFRESH_S)


def test_a_long_decision_wraps_and_is_never_clipped() -> None:
    """The daemon's decision column of a lane's history: a long decision (a sentence, a digest with no space
    to break at) is shown whole and wraps; no rule of the page hides, truncates or keeps it on one line."""
    digest = "sha256:" + "ab" * 160
    error = "the gate failed: " + " ".join(["a rank exited while waiting for port 8000"] * 8) + f" pulling {digest}"
    change = LaneChange("chat", "c" * 40, "alice", "a@example.org", 1_800_000_000, 0, "faster", ())
    applies = {"c" * 40: [{"result": "failed", "error": error, "cause": "not-ready", "timings": {"total": 601.0}}]}
    data = LaneData("chat", changes=(change,), applies=applies)
    doc = parse(page("chat", history_panel(data)))
    cell = doc.one("div", class_="decision")
    assert error in cell.text  # whole: nothing cut short in the markup
    css = doc.one("style").text.replace(" ", "")
    assert "td{overflow-wrap:anywhere}" in css
    assert ".decision{min-width:16rem;white-space:normal}" in css
    for clipping in ("text-overflow", "overflow:hidden", "white-space:nowrap;overflow", "td{white-space:nowrap"):
        assert clipping not in css.replace("th{font-weight:600;white-space:nowrap}", ""), clipping


def test_the_gateway_panel_shows_each_models_lanes_and_workers() -> None:
    """Each served model of the state with the lanes listed for it and the workers the last pass made the
    gateway hold; a model with none says so; the pass's error is shown as text."""
    from reconciler.dashboard.overview import gateway_panel
    from tests.support.example import EUGR, PRODUCTION, example_state

    desired = example_state()
    last = {
        "at": 100.0,
        "routes": {"deepseek-v4.1-flash": ["http://10.0.0.1:30000"], "deepseek-v4-flash": [], "glm-5.3": ["h"]},
        "away": {"glm-5.3": 312.4},
        "error": "<SMG> said no",
    }
    lanes: list[dict[str, Any]] = [{"name": PRODUCTION, "phase": "watching"}, {"name": EUGR, "phase": None}]
    html = gateway_panel(Snapshot("idle", "me", None, lanes, desired=desired, gateway=last))
    rows = {cells[0]: cells[1:] for cells in parse(html).rows()}
    assert rows["deepseek-v4.1-flash"] == [PRODUCTION, "http://10.0.0.1:30000", f"{PRODUCTION}: watching"]
    assert rows["deepseek-v4-flash"] == [EUGR, "no worker", "-"]
    # A model whose lanes change in place: the holding answer's route, said as what clients get.
    assert rows["glm-5.3"][1] == "away, back in about 312 s (503 with Retry-After)"
    assert desired.fleet.gateway is not None and set(rows) == set(desired.fleet.gateway.models)
    assert "1970-01-01T00:01:40Z" in html and "&lt;SMG&gt; said no" in html
    off = gateway_panel(Snapshot("idle", "me", None, [], desired=desired))
    assert "[gateway] enabled = false" in off
