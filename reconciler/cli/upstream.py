"""`lanes upstream` (the gap table) and `lanes propose` (proposal branches) from a shell.

`lanes upstream` prints what the team's note kept by hand: per lane, the
engine build, the newest upstream release and how far behind the build is.
It reads what the pollers recorded in sqlite; `--refresh` polls every source
first (honouring each source's rate-limit deadline), with one progress line
per source on stderr so `--json` stays clean on stdout.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console

from reconciler.cli import exitcodes
from reconciler.cli.common import EXIT_DENY, EXIT_OK, err_console, handle_errors
from reconciler.cli.paths import DEFAULT_DB, UPSTREAM_DATA
from reconciler.cli.tables import Column, print_table
from reconciler.daemon.config import load_config
from reconciler.source.acceptance import Signers, accepted
from reconciler.source.gitread import open_repo, read_commit
from reconciler.spec.load import DesiredState, load_desired
from reconciler.upstream.base import PollResult, PollSettings
from reconciler.upstream.forge import ForgeSettings
from reconciler.upstream.gap import GapRow, gap_rows
from reconciler.upstream.poll import poll_all
from reconciler.upstream.proposals import AcceptFn, ProposalOutcome, ProposalSettings, propose_all
from reconciler.upstream.store import UpstreamStore

RepoOpt = Annotated[str, typer.Option("--repo", help="path of the state repository")]
RevOpt = Annotated[str, typer.Option("--rev", help="commit, branch or tag whose lanes are compared")]
DbOpt = Annotated[Path, typer.Option("--db", envvar="LANES_DB", help="sqlite file (shared with the journal)")]
DataOpt = Annotated[Path, typer.Option("--data-dir", envvar="LANES_UPSTREAM_DIR", help="git mirrors of git heads")]
SecretsOpt = Annotated[
    Path | None,
    typer.Option("--secrets-dir", envvar="LANES_SECRETS_DIR", help="folder of credential files, one per name"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object")]
StateDirOpt = Annotated[str, typer.Option("--state-dir", help="folder of the state files in the repo")]


def load_state(repo: str, rev: str, state_dir: str) -> DesiredState:
    """Only `state/` is needed for the table: policies are not read (nor required)."""
    read = read_commit(open_repo(repo), rev, (state_dir,))
    return load_desired(read.files, read.commit, state_dir=state_dir)


def progress(result: PollResult) -> None:
    color = {"new": "cyan", "unchanged": "green", "failed": "red"}.get(result.status, "yellow")
    err_console().print(f"[{color}]{result.status:12}[/] {result.describe()}", highlight=False, soft_wrap=True)


TokensOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="the daemon's settings (reconciler.toml): the upstream tokens and the hosts each may go to; "
        "without it no token is sent to a source of upstreams.yaml; with signing on in it, `lanes propose` "
        "starts only from a commit the daemon would accept",
    ),
]


def signature_check(config: Path | None) -> AcceptFn | None:
    """With the daemon's settings and signing on, the daemon's own check of the commit proposals start from."""
    if config is None:
        return None
    repo = load_config(config).repo
    if not repo.require_signed_commits:
        return None
    signers = Signers(repo.require_signed_commits, repo.allowed_signers, repo.evidence_signers)
    return lambda repository, sha: accepted(repository, sha, signers)


def poll_settings(data_dir: Path, secrets_dir: Path | None, config: Path | None) -> PollSettings:
    """Tokens for upstreams.yaml only as the daemon's settings declare them (`[upstream.credentials]`)."""
    settings = PollSettings(data_dir=data_dir, credentials_dir=secrets_dir)
    if config is None:
        return settings
    declared = load_config(config).poll_settings()
    return settings.model_copy(
        update={"credentials": declared.credentials, "allow_insecure_hosts": declared.allow_insecure_hosts}
    )


@handle_errors
def upstream_cmd(
    repo: RepoOpt = ".",
    rev: RevOpt = "HEAD",
    db: DbOpt = DEFAULT_DB,
    refresh: Annotated[bool, typer.Option("--refresh", help="poll every upstream source first")] = False,
    as_json: JsonOpt = False,
    state_dir: StateDirOpt = "state",
    data_dir: DataOpt = UPSTREAM_DATA,
    secrets_dir: SecretsOpt = None,
    config: TokensOpt = None,
) -> None:
    """The gap table: each lane's engine build against the newest upstream release or branch head.

    Exit 5 when --refresh polled and every source failed (the table then shows earlier polls only).
    """
    desired = load_state(repo, rev, state_dir)
    settings = poll_settings(data_dir, secrets_dir, config)
    polled: list[PollResult] = []
    with UpstreamStore(db) as store:
        if refresh:
            polled = asyncio.run(poll_all(desired.upstreams, store, settings, on_result=progress))
        rows = gap_rows(desired, store)
    # Every source failing is no refresh at all: the table shows only what earlier polls recorded.
    code = exitcodes.UNAVAILABLE if polled and all(p.status == "failed" for p in polled) else EXIT_OK
    if as_json:
        out = {
            "ok": code == EXIT_OK,
            "exit_code": code,
            "commit": desired.commit,
            "lanes": [r.to_json() for r in rows],
            "polled": [p.to_json() for p in polled],
        }
        if code != EXIT_OK:
            out["error"] = f"every upstream source failed ({len(polled)}): the table is from earlier polls"
        print(json.dumps(out, indent=2))
    else:
        render_gap(rows, Console(), desired.commit)
        if code != EXIT_OK:
            err_console().print(
                f"[red]error:[/] every upstream source failed ({len(polled)}): the table is from earlier polls",
                highlight=False,
                soft_wrap=True,
            )
    raise typer.Exit(code)


def _between(values: tuple[str, ...]) -> str:
    if len(values) <= 6:
        return ", ".join(values)
    return f"{', '.join(values[:3])}, ..., {', '.join(values[-2:])} ({len(values)})"


def render_gap(rows: list[GapRow], console: Console, commit: str = "") -> None:
    title = f"Where we are{f' at {commit[:12]}' if commit else ''}"
    columns = [
        Column("lane", "key"),
        Column("engine build"),
        Column("built"),
        Column("upstream latest"),
        Column("date"),
        Column("gap", "text"),
        Column("in between", "text"),
    ]
    table = []
    styles = []
    for r in rows:
        build = f"{r.engine} {r.engine_version}" + (f" @{r.digest_short}" if r.digest_short else "")
        latest = f"{r.upstream}: {r.latest}" if r.upstream and r.latest else (r.upstream or "-")
        styles.append("green" if r.summary.endswith("current") or "current (" in r.summary else "")
        between = _between(r.between) if r.rule != "commit" else "; ".join(r.between[:3])
        table.append([r.lane, build, r.built or "?", latest, r.latest_date or "", r.summary, between])
    print_table(console, columns, table, title=title, styles=styles)


ForgeKind = Literal["github", "gitea"]


@handle_errors
def propose_cmd(
    repo: RepoOpt = ".",
    db: DbOpt = DEFAULT_DB,
    as_json: JsonOpt = False,
    remote: Annotated[str, typer.Option("--remote", help="remote to fetch from and push to ('' for none)")] = "origin",
    base: Annotated[str, typer.Option("--base", help="the branch proposals start from and target")] = "main",
    refresh: Annotated[bool, typer.Option("--refresh", help="poll every upstream source first")] = False,
    forge: Annotated[ForgeKind | None, typer.Option("--forge", help="open pull requests on github or gitea")] = None,
    forge_url: Annotated[str, typer.Option("--forge-url", help="API base URL of the forge")] = "https://api.github.com",
    forge_repo: Annotated[str | None, typer.Option("--forge-repo", help="owner/name on the forge")] = None,
    forge_token: Annotated[str | None, typer.Option("--forge-token", help="credential name of the API token")] = None,
    push_credential: Annotated[
        str | None, typer.Option("--push-credential", help="credential name, user:token")
    ] = None,
    author_name: Annotated[str, typer.Option("--author-name", help="author of proposal commits")] = "lanes",
    author_email: Annotated[str, typer.Option("--author-email")] = "lanes@localhost",
    state_dir: StateDirOpt = "state",
    data_dir: DataOpt = UPSTREAM_DATA,
    secrets_dir: SecretsOpt = None,
    config: TokensOpt = None,
) -> None:
    """Propose a branch (and a pull request) for the newest qualifying release of every tracking lane."""
    poll = poll_settings(data_dir, secrets_dir, config)
    forge_settings = None
    if forge is not None:
        if not forge_repo:
            raise typer.BadParameter("--forge needs --forge-repo owner/name", param_hint="--forge-repo")
        forge_settings = ForgeSettings(kind=forge, api_url=forge_url, repo=forge_repo, token_credential=forge_token)
    settings = ProposalSettings(
        remote=remote or None,
        base=base,
        state_dir=state_dir,
        author_name=author_name,
        author_email=author_email,
        push_credential=push_credential,
        forge=forge_settings,
        poll=poll,
    )
    with UpstreamStore(db) as store:
        if refresh:
            desired = load_state(repo, base, state_dir)
            asyncio.run(poll_all(desired.upstreams, store, poll, on_result=progress))
        outcomes = asyncio.run(propose_all(repo, store, settings, accept=signature_check(config)))
    failed = any(o.action == "failed" for o in outcomes)
    if as_json:
        print(json.dumps({"ok": not failed, "proposals": [o.to_json() for o in outcomes]}, indent=2))
    else:
        render_outcomes(outcomes, Console())
    raise typer.Exit(EXIT_DENY if failed else EXIT_OK)


def render_outcomes(outcomes: list[ProposalOutcome], console: Console) -> None:
    if not outcomes:
        console.print("no lane declares track:")
    for o in outcomes:
        color = {"opened": "cyan", "adopted": "cyan", "failed": "red", "limited": "yellow"}.get(o.action, "green")
        what = f"{o.version} on {o.branch}" if o.branch else o.message
        console.print(f"[{color}]{o.action:8}[/] [bold]{o.lane}[/]: {what}", highlight=False, soft_wrap=True)
        if o.pr_url:
            console.print(f"         pull request: {o.pr_url}", highlight=False)
        if o.message and o.branch:
            console.print(f"         {o.message}", highlight=False)
        for d in o.denial:
            console.print(f"         [red]DENY[/] {d}", highlight=False, soft_wrap=True)
