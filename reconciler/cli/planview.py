"""What `lanes plan` (and `lanes demo`) show of a plan: one line per lane, its diff and steps, the swaps.

A swap is shown as what it is, one transaction across lanes: a person reading the plan of a commit that
moves hosts from one lane to another must see that the old lane comes back if the new one fails, not two
unrelated lines (a stop and a deploy).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from reconciler.cli import exitcodes
from reconciler.cli.history import field_text
from reconciler.cli.plandiff import LaneDiff
from reconciler.cli.tables import paragraph
from reconciler.execute.cycle import CycleResult
from reconciler.plan.steps import Swap


def swap_text(swap: Swap) -> str:
    """One swap in words: who gives, who takes, where, and what happens if the taking side fails."""
    giving, taking = ", ".join(swap.giving), ", ".join(swap.taking)
    return (
        f"{giving} -> {taking} on {', '.join(swap.hosts)}, one transaction: {taking}'s images are pulled before "
        f"{giving} stops; if {taking} fails its readiness gate, {giving} comes back on its last healthy spec"
    )


def blocked_lanes(result: CycleResult) -> list[dict[str, Any]]:
    """Lanes the plan cannot act on now (a host unreachable, a lease, a failed spec, a retry pending)."""
    return [
        {"name": lp.lane, "cause": lp.cause.value, "reason": lp.reason, "hosts": list(lp.hosts)}
        for lp in result.plan.lanes
        if lp.action == "blocked"
    ]


def unreachable_hosts(result: CycleResult, only: frozenset[str] | None) -> list[str]:
    """Hosts that did not answer: all of them, or with --lane those the chosen lanes run on."""
    down = result.observed.unreachable()
    if only is None:
        return list(down)
    involved = {h for lp in result.plan.lanes for h in lp.hosts}
    return [h for h in down if h in involved]


def plan_to_json(
    result: CycleResult,
    diffs: dict[str, LaneDiff] | None = None,
    only: frozenset[str] | None = None,
    code: int | None = None,
) -> dict[str, Any]:
    diffs = diffs or {}
    out: dict[str, Any] = {
        "commit": result.commit,
        "changes": not result.plan.empty,
        "blocked": blocked_lanes(result),
        "unreachable": unreachable_hosts(result, only),
        "swaps": [
            {"giving": list(s.giving), "taking": list(s.taking), "hosts": list(s.hosts), "describe": swap_text(s)}
            for s in result.plan.swaps
        ],
        "lanes": [
            {
                "name": lp.lane,
                "action": lp.action,
                "reason": lp.reason,
                "cause": lp.cause.value,
                "drift": [d.to_json() for d in lp.drift],
                "hosts": list(lp.hosts),
                "after": list(lp.after),
                "rollout": lp.rollout.to_json() if lp.rollout is not None else None,
                "per_host": {host: dict(values) for host, values in lp.per_host},
                "steps": [{"kind": s.kind, "describe": s.describe()} for s in lp.steps],
                **({"diff": diffs[lp.lane].to_json()} if lp.lane in diffs else {}),
            }
            for lp in result.plan.lanes
        ],
    }
    if code is not None:
        out["ok"] = code in (exitcodes.OK, exitcodes.CHANGES)
        out["exit_code"] = code
    return out


ACTION_COLORS = {
    "deploy": "cyan",
    "verify": "cyan",
    "stop": "magenta",
    "noop": "green",
    "denied": "red",
    "fail": "red",
    "blocked": "yellow",
    "suspended": "magenta",
}
INDENT = " " * 10


def _say(console: Console, markup: str) -> None:
    """A plan line: wrapped at words at the terminal's width, continued under its text; whole in a pipe."""
    indent = len(markup) - len(markup.lstrip(" "))
    paragraph(console, markup, indent=indent + 2 if indent else len(INDENT))


def print_plan(
    result: CycleResult,
    console: Console,
    diffs: dict[str, LaneDiff] | None = None,
    only: frozenset[str] | None = None,
) -> None:
    """One line per lane (its action and why), then what changes in it and its steps; then the swaps, each one
    transaction; blocked is never 'nothing'."""
    diffs = diffs or {}
    for lp in result.plan.lanes:
        color = ACTION_COLORS.get(lp.action, "yellow")
        diff = diffs.get(lp.lane)
        reason = lp.reason
        if diff is not None and diff.files and lp.cause.value == "spec-changed":
            reason = f"the spec changed since {diff.running[0][:12]}, the commit its containers run:"
        _say(console, f"[{color}]{lp.action:7}[/] [bold]{escape(lp.lane)}[/]: {escape(reason)}")
        if diff is not None:
            for file in diff.files:
                _say(console, f"{INDENT}[dim]{escape(file.path)}[/] ({file.status})")
                if file.error:
                    _say(console, f"{INDENT}  {escape(file.error)}")
                for change in file.fields:
                    data = {"field": change.field, "kind": change.kind, "old": change.old, "new": change.new}
                    _say(console, f"{INDENT}  {field_text(data)}")
            if diff.problem:
                _say(console, f"{INDENT}[yellow]{escape(diff.problem)}[/]")
            if diff.restarts and lp.rollout is not None:
                _say(console, f"{INDENT}restarts {escape(', '.join(diff.restarts))}")
            elif diff.restarts:
                downtime = (
                    f"; expected downtime about {diff.last_ready_s:.0f} s (its last start took that to a first token)"
                    if diff.last_ready_s is not None
                    else "; expected downtime unknown (no start of this lane measured yet)"
                )
                _say(console, f"{INDENT}restarts {escape(', '.join(diff.restarts))}{downtime}")
        if lp.rollout is not None:
            _say(console, f"{INDENT}[bold]rollout[/] {escape(lp.rollout.describe())}")
        if lp.after:
            why = (
                "one replica at a time"
                if lp.rollout is not None and lp.rollout.kind.value == "one-replica-at-a-time"
                else "its after: in the lane file"
            )
            _say(console, f"{INDENT}after {escape(', '.join(lp.after))} ({why})")
        if lp.per_host and lp.steps:
            for host, values in lp.per_host:
                said = " ".join(f"{var}={value}" for var, value in values)
                _say(console, f"{INDENT}on {escape(host)}: {escape(said)} (host_env)")
        for i, step in enumerate(lp.steps, 1):
            _say(console, f"{INDENT}{i}. {escape(step.describe())}")
    for swap in result.plan.swaps:
        _say(console, f"[cyan]swap   [/] {escape(swap_text(swap))}")
    blocked = blocked_lanes(result)
    unreachable = unreachable_hosts(result, only)
    if unreachable:
        _say(console, f"[yellow]unreachable:[/] {escape(', '.join(unreachable))}: what runs there is unknown")
    if blocked:
        _say(console, f"[yellow]blocked:[/] {len(blocked)} lane(s) cannot be reconciled now")
    if result.plan.empty and (blocked or unreachable):
        _say(console, "[yellow]no changes planned, but lanes cannot tell the fleet is in sync (see above)[/]")
    elif result.plan.empty:
        _say(console, "[green]nothing to do[/]")
