"""The SVG chart is well-formed XML with a bar row per metric and grid point."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from reconciler.bench import chart, evidence
from reconciler.spec.bench import NoiseRule

from .test_evidence import make

pytestmark = pytest.mark.timeout(10)
SVG = "{http://www.w3.org/2000/svg}"


def test_a_chart_without_baseline() -> None:
    root = ET.fromstring(chart.render_svg(make(lane="a&b <lane>")))
    assert root.tag == f"{SVG}svg"
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert any("a&b <lane>" in t for t in texts)  # escaped in the file, intact when parsed
    assert any("no baseline" in t for t in texts)
    assert len(root.findall(f"{SVG}rect")) == 1 + 3  # background + pp, tg, TTFT (itl is missing)


def test_a_chart_against_its_baseline_colours_the_regression() -> None:
    base = make(std=0.01)
    now = make(tg=40.0, std=0.01)
    now["comparison"] = evidence.compare(now, base, NoiseRule())
    svg = chart.render_svg(now, base)
    root = ET.fromstring(svg)
    fills = [r.get("fill") for r in root.findall(f"{SVG}rect")]
    assert fills.count(chart.BASE_COLOR) == 3 and chart.WORSE_COLOR in fills
    assert "REGRESSION" in svg and "-20.0%" in svg
    # Without the baseline file the comparison's own baseline means are drawn.
    again = ET.fromstring(chart.render_svg(now))
    assert [r.get("fill") for r in again.findall(f"{SVG}rect")].count(chart.BASE_COLOR) == 3
