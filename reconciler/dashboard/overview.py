"""The overview page: lanes and what they wait for, hosts and their facts, per-rank memory, the upstream gap."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reconciler.dashboard.page import e, lane_href, page, section, short, table
from reconciler.dashboard.snapshot import Snapshot
from reconciler.facts.observed import ObservedHost
from reconciler.store.status import drift_text, error_text, instant_text, staging_text

GIB = float(1 << 30)


def render_overview(snap: Snapshot) -> str:
    parts = [
        section("lanes", "Lanes", lanes_panel(snap)),
        section("hosts", "Hosts", hosts_panel(snap)),
        section("memory", "Memory per rank", memory_panel(snap.check)),
        section("gap", "Upstream gap", gap_panel(snap)),
    ]
    if snap.gateway is not None or (snap.desired is not None and snap.desired.fleet.gateway is not None):
        parts.insert(1, section("gateway", "Gateway routes", gateway_panel(snap)))
    head = f"daemon {e(snap.owner)} · {e(snap.phase)} · head {short(snap.head)}"
    if snap.refused:
        refused = f"refused {short(snap.refused.get('commit'))}: {e(snap.refused.get('reason'))}"
        head += f' · <span class="refused">{refused}</span>'
    return page("lanes dashboard", "".join(parts), subtitle=head)


# -- lanes -------------------------------------------------------------------------------


def waits_for(row: Mapping[str, Any], snap: Snapshot) -> list[str]:
    """What keeps a lane from converging now, each as markup: suspended, held, staging, blocked, backoff."""
    out = []
    held = row.get("suspension")
    if held:
        out.append(
            f'<span class="suspended">suspended</span> by {e(held["by"])} at {e(held["at"])}: {e(held["reason"])} '
            f"(<code>lanes resume {e(row['name'])}</code>)"
        )
    elif row.get("suspended"):
        out.append('<span class="suspended">suspended</span>: the daemon leaves what runs alone')
    staging = staging_text(row.get("staging"))
    if staging:
        out.append(f'<span class="held">{e(staging)}</span> (before its old ranks stop)')
    if row.get("held_until"):
        out.append(
            f'<span class="held">held until {e(row["held_until"])}</span> by a change window '
            "(<code>lanes apply --now</code> applies it at once)"
        )
    name = str(row["name"])
    if name in snap.blocked:
        out.append(f'<span class="blocked">blocked</span>: {e(snap.blocked[name])}')
    # A backoff only matters while the lane is not healthy at its wanted commit: a lane that got there
    # since (a newer commit, `lanes retry`) keeps an old schedule row that says nothing about it now.
    settled = row.get("health") == "healthy" and row.get("commit") is not None
    settled = settled and row.get("commit") == row.get("desired_commit")
    if name in snap.retry_at and not settled:
        at = snap.retry_at[name]
        if at > snap.now:
            out.append(f'<span class="warn">retry after {e(instant_text(at))}</span> (backoff)')
        else:
            out.append('<span class="warn">retry due</span> (backoff over; the next cycle tries it)')
    return out


def lanes_panel(snap: Snapshot) -> str:
    if not snap.rows:
        return '<p class="dim">no lanes yet</p>'
    rows = []
    for row in snap.rows:
        health = str(row["health"])
        waits = waits_for(row, snap)
        evidence = row.get("evidence") or {}
        figures = " · ".join(e(evidence[k]) for k in ("pp", "tg") if evidence.get(k))
        drift = drift_text(row.get("drift"))
        drift_note = f'<br><span class="dim">{e(drift)}</span>' if drift else ""
        rows.append(
            [
                f'<a href="{e(lane_href(str(row["name"])))}">{e(row["name"])}</a>',
                f'<span class="{e(health)}">{e(health)}</span>',
                e(row["desired"]),
                short(row.get("commit")),
                e(", ".join(row.get("hosts") or ())),
                "<br>".join(waits) or '<span class="dim">nothing</span>',
                e(error_text(row)) if error_text(row) else '<span class="dim">none</span>',
                (figures or '<span class="dim">none</span>') + drift_note,
            ]
        )
    headers = ["lane", "health", "desired", "commit", "hosts", "waits for", "last error", "evidence"]
    return table(headers, rows, label="lanes")


# -- hosts -------------------------------------------------------------------------------


def _gib(value: int | None) -> str:
    return "?" if value is None else f"{value / GIB:.1f} GiB"


def host_facts(seen: ObservedHost) -> list[str]:
    """The probe's facts of one host, each as markup."""
    facts = []
    info = seen.info
    if info is not None:
        os_name = info.os_release or "?"
        if info.dgx_release is not None and info.dgx_release.build:
            os_name += f" (DGX OS {info.dgx_release.build})"
        facts.append(f"OS {e(os_name)}, kernel {e(info.kernel or '?')} {e(info.arch or '')}")
        facts.append(f"driver {e(info.driver_version or '?')}, CUDA {e(info.cuda_version or '?')}")
        if info.gpu_processes is not None:
            facts.append(f"GPU processes: {len(info.gpu_processes)}")
        links = [
            f"{link.name} {link.operstate}, MTU {link.mtu}"
            + (f", {link.speed_mbps // 1000} Gb/s" if link.speed_mbps else "")
            for link in info.links or ()
            if link.name != "lo"
        ]
        if links:
            facts.append("links: " + e("; ".join(links)))
    if seen.memory is not None:
        facts.append(f"memory available {_gib(seen.memory.available_bytes)} of {_gib(seen.memory.total_bytes)}")
    if seen.disk_free is not None:
        facts.append(f"disk free {_gib(seen.disk_free)} of {_gib(seen.disk_total)}")
    if seen.lease is not None:
        facts.append(f"lease held by {e(seen.lease.owner)} until {e(instant_text(seen.lease.expires))}")
    facts += [f'<span class="warn">unread: {e(p)}</span>' for p in seen.probe_errors]
    return facts


def hosts_panel(snap: Snapshot) -> str:
    observed = snap.observed
    if observed is None or not observed.hosts:
        return '<p class="dim">no probe yet: the daemon has not finished a cycle</p>'
    rows = []
    for name in sorted(observed.hosts):
        seen = observed.hosts[name]
        state = (
            '<span class="ok">reachable</span>'
            if seen.reachable
            else f'<span class="bad">unreachable</span>: {e(seen.error)}'
        )
        ranks = ", ".join(c.name for c in seen.containers if c.state == "running")
        rows.append(
            [
                e(name),
                state,
                e(seen.hostname or ""),
                "<ul>" + "".join(f"<li>{f}</li>" for f in host_facts(seen)) + "</ul>",
                e(ranks) or '<span class="dim">none</span>',
                e(instant_text(seen.probed_at)) if seen.probed_at else '<span class="dim">?</span>',
            ]
        )
    return table(["host", "state", "hostname", "facts", "running", "probed (host clock)"], rows, label="hosts")


# -- memory ------------------------------------------------------------------------------


def rank_bar(rank: Mapping[str, Any]) -> str:
    """Weights, KV, drafter and overhead side by side, on a scale of the host's memory, the budget marked.

    vLLM's budget covers the overhead too, so it is drawn inside. SGLang's static budget
    (`--mem-fraction-static`) holds weights and the KV pool only, and activations and graphs live in the
    remainder beyond it (`overhead_inside_budget` false). There the overhead is drawn after the budget line,
    not as if it overflowed the budget.
    """
    budget = int(rank["budget"])
    inside = [("weights", int(rank["weights"])), ("kv", int(rank["kv_min"])), ("drafter", int(rank["drafter"]))]
    overhead = ("overhead", int(rank["overhead"]))
    outside = rank.get("overhead_inside_budget") is False
    parts = inside if outside else [*inside, overhead]
    used = sum(v for _, v in parts)
    if outside:
        parts = [*parts, ("gap", max(0, budget - used)), overhead]
    scale = max(int(rank["capacity"]), budget, sum(v for _, v in parts), 1)
    spans = "".join(
        f'<span class="{kind}" style="width:{100 * value / scale:.2f}%" title="{kind} {value / GIB:.1f} GiB"></span>'
        for kind, value in parts
        if value > 0
    )
    mark = f'<i class="budget" style="left:{100 * budget / scale:.2f}%" title="budget"></i>'
    where = " outside the static budget" if outside else ""
    label = (
        f"weights {_gib(rank['weights'])}, KV {_gib(rank['kv_min'])}, drafter {_gib(rank['drafter'])}, "
        f"overhead {_gib(rank['overhead'])}{where}; budget {_gib(rank['budget'])}"
    )
    return f'<div class="bar" role="img" aria-label="{e(label)}">{spans}{mark}</div>'


def memory_panel(check: Mapping[str, Any] | None) -> str:
    budgets = (check or {}).get("budgets") or {}
    if not budgets:
        return '<p class="dim">no figures yet: the daemon has not evaluated a commit</p>'
    rows = []
    for lane, figures in sorted(budgets.items()):
        for rank in figures["ranks"]:
            headroom = int(rank["headroom"])
            fits = f'<span class="{"ok" if headroom >= 0 else "bad"}">{_gib(headroom)}</span>'
            rows.append(
                [
                    f'<a href="{e(lane_href(lane))}">{e(lane)}</a>',
                    e(rank["rank"]),
                    e(rank["host"]),
                    f"<code>{e(rank['flag'])} {e(rank['utilization'])}</code>",
                    rank_bar(rank),
                    f"{e(_gib(rank['need']))} of {e(_gib(rank['budget']))}" + (" (floor)" if rank["floor"] else ""),
                    fits,
                    f"{e(_gib(rank['pool']))}, {e(rank['context'])} tokens",
                ]
            )
    key = (
        '<p class="key dim">'
        + "".join(f'<span class="{k}"></span>{k}' for k in ("weights", "kv", "drafter", "overhead"))
        + '<span style="border-left:3px solid var(--bad);width:0"></span>budget</p>'
    )
    headers = ["lane", "rank", "host", "budget flag", "memory", "need", "headroom", "KV pool"]
    return key + table(headers, rows, label="memory per rank")


# -- upstream gap ------------------------------------------------------------------------


def gap_panel(snap: Snapshot) -> str:
    if snap.gap_error is not None:
        return f'<p class="bad">{e(snap.gap_error)}</p>'
    if snap.gaps is None:
        return '<p class="dim">no desired state yet</p>'
    rows = [
        [
            f'<a href="{e(lane_href(g.lane))}">{e(g.lane)}</a>',
            f"{e(g.engine)} <code>{e(g.engine_version)}</code>",
            e(g.built or "?"),
            e(g.upstream or "none"),
            f"{e(g.latest or '?')}" + (f' <span class="dim">{e(g.latest_date)}</span>' if g.latest_date else ""),
            e(g.summary),
        ]
        for g in snap.gaps
    ]
    return table(["lane", "engine", "built", "upstream", "latest", "gap"], rows, label="upstream gap")


def gateway_panel(snap: Snapshot) -> str:
    """Each served model name: the lanes the state lists for it, and the workers the gateway was last made to
    hold (none: requests for it are refused, not sent to a lane that is not serving its wanted spec)."""
    gateway = snap.desired.fleet.gateway if snap.desired is not None else None
    if snap.gateway is None:
        return '<p class="dim">the daemon does not keep the routes ([gateway] enabled = false)</p>'
    last = snap.gateway
    routes: Mapping[str, Any] = last.get("routes") or {}
    models = list(gateway.models) if gateway is not None else sorted(routes)
    away: Mapping[str, Any] = last.get("away") or {}
    phases = {row["name"]: row.get("phase") for row in snap.rows}
    rows = []
    for model in models:
        lanes = gateway.models[model] if gateway is not None else ()
        workers = routes.get(model) or []
        shown = " ".join(f"<code>{e(url)}</code>" for url in workers) or '<span class="bad">no worker</span>'
        if model in away:
            shown = f'<span class="warn">away, back in about {float(away[model]):.0f} s</span> (503 with Retry-After)'
        rollout = " ".join(f"{e(lane)}: {e(phases[lane])}" for lane in lanes if phases.get(lane)) or "-"
        rows.append(
            [
                f"<code>{e(model)}</code>",
                " ".join(f'<a href="{e(lane_href(lane))}">{e(lane)}</a>' for lane in lanes),
                shown,
                rollout,
            ]
        )
    said = f"last pass {e(instant_text(last['at']))}" if last.get("at") else "no pass yet"
    if last.get("error"):
        said += f' · <span class="bad">{e(last["error"])}</span>'
    header = ["model", "lanes", "workers", "in flight"]
    return f'<p class="dim">{said}</p>' + table(header, rows, label="gateway routes")
