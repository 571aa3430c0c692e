"""`lanes check` for people: the verdict as tables and paragraphs (`reconciler.cli.check` prints `--json`)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from reconciler.cli.checkflags import describe
from reconciler.cli.common import gib
from reconciler.cli.tables import Column, paragraph, print_table
from reconciler.policy import Verdict


def print_check(verdict: Verdict, judged: dict[str, dict[str, object]], worktree_changes: int) -> None:
    """The verdict, the engine flags judged, and how many uncommitted files a --worktree check covered."""
    console = Console()
    render_verdict(verdict, console)
    if judged:
        paragraph(console, "Engine flags judged:")
        for name, how in judged.items():
            paragraph(console, escape(f"  {describe(name, how)}"))
    if worktree_changes:
        console.print(f"checked the working tree: {worktree_changes} uncommitted file(s) over HEAD")


def render_verdict(verdict: Verdict, console: Console) -> None:
    # Names and figures whole at any width (`reconciler.cli.tables`): at 80 columns the lane heads its ranks.
    columns = [
        Column("lane", "key"),
        Column("rank", "num"),
        Column("host"),
        *(Column(name, "num") for name in ("weights", "KV", "overhead", "need", "budget", "headroom")),
    ]
    rows = [
        [
            b.lane,
            str(b.rank),
            b.host,
            gib(b.weights),
            gib(b.kv_min) + (" (floor)" if b.floor else ""),
            gib(b.overhead),
            gib(b.need),
            gib(b.budget),
            gib(b.headroom),
        ]
        for b in verdict.budgets
    ]
    styles = ["red" if b.headroom < 0 else "" for b in verdict.budgets]
    print_table(console, columns, rows, title=f"Per-rank memory budget at {verdict.commit[:12]} (GiB)", styles=styles)
    if verdict.ports:
        paragraph(console, "Ports each lane listens on (API, torch.distributed, Ray; checked for clashes per host):")
        for lane, ports in sorted(verdict.ports.items()):
            spans = ", ".join(f"{what} {span}" for what, span in ports.items())
            paragraph(console, escape(f"  {lane}: {spans}"))
    if not verdict.violations:
        console.print("[green]no violations[/]")
    for v in verdict.violations:
        color = "red" if v.severity == "deny" else "yellow"
        where = " ".join(
            part for part in (v.lane or "", f"rank {v.rank}" if v.rank is not None else "", v.host or "") if part
        )
        head = f"[{color}]{v.severity.upper()}[/] [bold]{escape(v.rule)}[/]"
        paragraph(console, f"{head} {escape(where)}: {escape(v.message)}")
    status = "[green]ok[/]" if verdict.ok else "[red]denied[/]"
    console.print(
        f"{status}: {sum(v.severity == 'deny' for v in verdict.violations)} deny, "
        f"{sum(v.severity == 'warn' for v in verdict.violations)} warn"
    )
