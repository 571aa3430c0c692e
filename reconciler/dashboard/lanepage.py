"""One lane's page: its status, its history with the daemon's decisions, and its evidence over commits."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.bench.chart import render_svg
from reconciler.bench.evidence import headline
from reconciler.dashboard.overview import waits_for
from reconciler.dashboard.page import e, page, section, short, table
from reconciler.dashboard.snapshot import Snapshot
from reconciler.dashboard.trend import render_trend
from reconciler.source.history import LaneChange, show_value
from reconciler.store.status import error_text

CHARTS = 3
"""Evidence files drawn in full (newest first); the trend shows every one."""


@dataclass(frozen=True)
class LaneData:
    name: str
    changes: Sequence[LaneChange] = ()
    """`reconciler.source.history.lane_history`: newest first."""
    applies: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    """commit -> the journal's apply rows for this lane (oldest first)."""
    decisions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """commit -> the daemon's decision about it (`Store.commit_outcome`)."""
    evidence: Sequence[tuple[str, Mapping[str, Any]]] = ()
    """(path, evidence) of the lane's evidence files at the head, oldest first."""


def render_lane(snap: Snapshot, data: LaneData) -> str:
    row = next((r for r in snap.rows if r["name"] == data.name), None)
    body = section("status", "Status", _status(snap, row))
    body += section("history", "History and the daemon's decisions", history_panel(data))
    body += section("evidence", "Evidence over commits", evidence_panel(data))
    return page(f"lane {data.name}", body, subtitle=f"daemon {e(snap.owner)} · head {short(snap.head)}")


def _status(snap: Snapshot, row: Mapping[str, Any] | None) -> str:
    if row is None:
        return '<p class="dim">not in the desired state nor in the journal</p>'
    health = str(row["health"])
    waits = waits_for(row, snap)
    items = [
        f'health <span class="{e(health)}">{e(health)}</span>, desired {e(row["desired"])}',
        f"runs {short(row.get('commit'))}, wants {short(row.get('desired_commit'))}",
        f"hosts {e(', '.join(row.get('hosts') or ()))}",
        "waits for: " + ("; ".join(waits) if waits else "nothing"),
        f"last error: {e(error_text(row))}" if error_text(row) else "last error: none",
    ]
    return "<ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"


def _field_changes(change: LaneChange) -> str:
    lines = []
    for f in change.files:
        if f.error:
            lines.append(f"{e(f.path)}: {e(f.status)} ({e(f.error)})")
            continue
        if f.status != "modified":
            lines.append(f"{e(f.path)}: {e(f.status)}")
            continue
        for c in f.fields[:MAX_FIELDS_SHOWN]:
            old = "(unset)" if c.kind == "added" else _clip(show_value(c.old))
            new = "(unset)" if c.kind == "removed" else _clip(show_value(c.new))
            lines.append(f"<code>{e(_clip(c.field))}</code>: {e(old)} → {e(new)}")
        if len(f.fields) > MAX_FIELDS_SHOWN:
            lines.append(f"{e(f.path)}: and {len(f.fields) - MAX_FIELDS_SHOWN} more changed fields (`lanes history`)")
    return "<br>".join(lines)


MAX_FIELDS_SHOWN = 40
MAX_VALUE_CHARS = 300
"""A page lists 50 changes: a field's value is a line of it, never a whole pushed document."""


def _clip(text: str) -> str:
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


def _decisions(data: LaneData, commit: str) -> str:
    lines = []
    for a in data.applies.get(commit, ()):
        result = str(a.get("result") or "?")
        timings = a.get("timings") or {}
        total = timings.get("total") if isinstance(timings, Mapping) else None
        text = f'<span class="{e(result)}">{e(result)}</span>'
        if total is not None:
            text += f" in {float(total):.1f} s"
        if a.get("cause"):
            text += f" ({e(a['cause'])})"
        if a.get("error"):
            text += f": {e(a['error'])}"
        if a.get("engine_error") and str(a["engine_error"]) not in str(a.get("error") or ""):
            text += f"; engine: {e(a['engine_error'])}"
        lines.append(text)
    decision = data.decisions.get(commit)
    if decision is not None:
        outcome = str(decision.get("outcome") or "?")
        mine = [x for x in (decision.get("detail") or {}).get("lanes") or () if x.get("lane") == data.name]
        refused = (decision.get("detail") or {}).get("refused")
        text = f'commit <span class="{e(outcome)}">{e(outcome)}</span>'
        for entry in mine:
            if not lines:  # the journal's rows say more; the commit record stands in when they were pruned
                text += f"; lane {e(entry.get('result'))}"
                if entry.get("rule"):
                    text += f" by {e(entry['rule'])}"
                if entry.get("error"):
                    text += f": {e(entry['error'])}"
            if entry.get("held_until"):
                text += f"; held until {e(entry['held_until'])}"
        if refused:
            text += f": {e(refused)}"
        lines.append(text)
    return '<div class="decision">' + ("<br>".join(lines) or '<span class="dim">no decision recorded</span>') + "</div>"


def history_panel(data: LaneData) -> str:
    if not data.changes:
        return '<p class="dim">no commit changed this lane</p>'
    rows = [
        [
            f"<code>{short(c.commit)}</code>",
            e(time.strftime("%Y-%m-%d %H:%M", time.gmtime(c.time))),
            e(c.author),
            f"{e(c.subject)}<br>{_field_changes(c)}",
            _decisions(data, c.commit),
        ]
        for c in data.changes
    ]
    return table(["commit", "when (UTC)", "author", "change", "daemon"], rows, label="history")


def evidence_panel(data: LaneData) -> str:
    if not data.evidence:
        return '<p class="dim">no evidence yet ([bench] enabled commits evidence/&lt;lane&gt;/ after each change)</p>'
    rows = []
    for path, ev in reversed(data.evidence):
        figures = " · ".join(headline(ev).values())
        regression = ev.get("regression")
        rows.append(
            [
                f"<code>{short(str(ev.get('commit') or ''))}</code>",
                e(ev.get("time")),
                e(f"{ev.get('engine', '')} {ev.get('engine_version', '')}"),
                '<span class="bad">regression</span>' if regression else '<span class="ok">no regression</span>',
                f"<code>{e(path)}</code>" + (f"<br>{e(figures)}" if figures else ""),
            ]
        )
    charts = "".join(
        f'<figure class="scroll">{render_svg(ev)}<figcaption class="dim">{e(path)}</figcaption></figure>'
        for path, ev in list(reversed(data.evidence))[:CHARTS]
    )
    trend = f'<figure class="scroll">{render_trend(data.name, [ev for _, ev in data.evidence])}</figure>'
    return trend + table(["commit", "measured", "engine", "verdict", "file"], rows, label="evidence") + charts
