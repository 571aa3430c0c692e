"""`lanes check`: validate a commit and evaluate the policies, before any host is touched."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from reconciler.cli.checkflags import flags_judged
from reconciler.cli.common import EXIT_DENY, EXIT_OK, err_console, fail, handle_errors, json_text, load_commit
from reconciler.cli.paths import DEFAULT_DB, UPSTREAM_DATA
from reconciler.policy import evaluate
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
        from rich.markup import escape

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
        print(json_text(out))
    else:
        # For people: rich and the table layout, which `--json` never needs (about 30 ms of imports).
        from reconciler.cli.checkview import print_check

        print_check(verdict, judged, len(changed) if worktree else 0)
    raise typer.Exit(code)
