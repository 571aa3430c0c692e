"""`lanes check`: validate a commit and evaluate the policies, before any host is touched."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from reconciler.cli.common import EXIT_DENY, EXIT_OK, gib, handle_errors, load_commit
from reconciler.cli.tables import Column, paragraph, print_table
from reconciler.cli.upstream import DEFAULT_DATA as UPSTREAM_DATA
from reconciler.policy import Verdict, evaluate
from reconciler.upstream.ancestry import fix_ancestry


@handle_errors
def check(
    repo: Annotated[str, typer.Option("--repo", help="path of the state repository")] = ".",
    rev: Annotated[str, typer.Option("--rev", help="commit, branch or tag to check")] = "HEAD",
    state_dir: Annotated[str, typer.Option(help="folder of the state files in the repo")] = "state",
    policies_dir: Annotated[str, typer.Option(help="folder of the policy files in the repo")] = "policies",
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Check a commit against the policies: exit 0 fine, 1 a deny, 2 bad input."""
    loaded = load_commit(repo, rev, state_dir, policies_dir)
    # Whether a git build holds a known issue's fix, from the mirrors `lanes upstream` keeps (none: not checked).
    answers = fix_ancestry(loaded.desired, loaded.policies.known_issues, UPSTREAM_DATA)
    verdict = evaluate(loaded.desired, loaded.policies, fix_ancestry=answers)
    if as_json:
        print(json.dumps(verdict.to_json(), indent=2, sort_keys=False))
    else:
        render_verdict(verdict, Console())
    raise typer.Exit(EXIT_OK if verdict.ok else EXIT_DENY)


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
