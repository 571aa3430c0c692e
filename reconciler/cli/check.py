"""`lanes check`: validate a commit and evaluate the policies, before any host is touched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from reconciler.cli.checkflags import describe, flags_judged
from reconciler.cli.common import EXIT_DENY, EXIT_OK, err_console, fail, gib, handle_errors, load_commit
from reconciler.cli.paths import DEFAULT_DB, UPSTREAM_DATA
from reconciler.cli.tables import Column, paragraph, print_table
from reconciler.policy import Verdict, evaluate
from reconciler.source.gitread import open_repo
from reconciler.source.worktree import uncommitted, worktree_commit
from reconciler.upstream.ancestry import fix_ancestry


@handle_errors
def check(
    repo: Annotated[str, typer.Option("--repo", help="path of the state repository")] = ".",
    rev: Annotated[str, typer.Option("--rev", help="commit, branch or tag to check")] = "HEAD",
    state_dir: Annotated[str, typer.Option(help="folder of the state files in the repo")] = "state",
    policies_dir: Annotated[str, typer.Option(help="folder of the policy files in the repo")] = "policies",
    worktree: Annotated[
        bool, typer.Option("--worktree", help="check the files as they are, uncommitted changes included")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    db: Annotated[
        Path, typer.Option("--db", envvar="LANES_DB", help="journal whose kept preflight verdicts count (read only)")
    ] = DEFAULT_DB,
) -> None:
    """Check a commit against the policies: exit 0 fine, 1 a deny, 2 bad input.

    Uncommitted changes under the state and policy folders are named (they are not in the commit checked);
    --worktree checks them.
    """
    folders = (state_dir, policies_dir)
    repository = open_repo(repo)
    changed = uncommitted(repository, folders) if rev == "HEAD" else []
    if worktree:
        if rev != "HEAD":
            fail("--worktree checks the working tree over HEAD; leave --rev out", as_json=as_json, field="--rev")
        rev = worktree_commit(repository, folders) if changed else rev
    loaded = load_commit(repository, rev, state_dir, policies_dir)
    # Whether a git build holds a known issue's fix, from the mirrors `lanes upstream` keeps (none: not checked).
    answers = fix_ancestry(loaded.desired, loaded.policies.known_issues, UPSTREAM_DATA)
    verdict = evaluate(loaded.desired, loaded.policies, fix_ancestry=answers)
    verdict, judged = flags_judged(loaded.desired, verdict, db)
    code = EXIT_OK if verdict.ok else EXIT_DENY
    if changed and not worktree:
        names = ", ".join(f"{path} ({word})" for path, word in changed)
        err_console().print(
            f"[yellow]warning:[/] uncommitted changes are not checked (this checks HEAD {loaded.commit[:12]}): "
            f"{escape(names)}; commit them, or check them with --worktree",
            highlight=False,
            soft_wrap=True,
        )
    if as_json:
        out = {**verdict.to_json(), "flags_judged": judged, "exit_code": code}
        out["uncommitted"] = [{"path": p, "status": w} for p, w in changed]
        out["worktree"] = worktree
        print(json.dumps(out, indent=2, sort_keys=False))
    else:
        console = Console()
        render_verdict(verdict, console)
        if judged:
            paragraph(console, "Engine flags judged:")
            for name, how in judged.items():
                paragraph(console, escape(f"  {describe(name, how)}"))
        if worktree and changed:
            console.print(f"checked the working tree: {len(changed)} uncommitted file(s) over HEAD")
    raise typer.Exit(code)


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
