"""`lanes plan`, `lanes apply`, `lanes status`, `lanes retry`: reconcile from a shell."""

from __future__ import annotations

import asyncio
import json
import time
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from reconciler.cli.common import EXIT_DENY, EXIT_OK, fail, handle_errors, load_commit
from reconciler.cli.daemonview import ask_daemon, needs_attention, trouble_lines
from reconciler.cli.upstream import DEFAULT_DATA as UPSTREAM_DATA
from reconciler.execute.apply import ProgressEvent
from reconciler.execute.cycle import CycleResult, CycleRunner, CycleSettings
from reconciler.execute.secrets import SecretStore
from reconciler.spec.load import DesiredState
from reconciler.store.journal import Store
from reconciler.store.status import drift_text, status_rows
from reconciler.transport.ssh import SSHTransport
from reconciler.upstream.ancestry import fix_ancestry

RepoOpt = Annotated[str, typer.Option("--repo", help="path of the state repository")]
RevOpt = Annotated[str, typer.Option("--rev", help="commit, branch or tag to reconcile toward")]
DbOpt = Annotated[Path, typer.Option("--db", envvar="LANES_DB", help="sqlite journal and status")]
KnownHostsOpt = Annotated[
    Path, typer.Option("--known-hosts", envvar="LANES_KNOWN_HOSTS", help="pinned host keys (no trust on first use)")
]
KeyOpt = Annotated[Path, typer.Option("--ssh-key", envvar="LANES_SSH_KEY", help="private key for the hosts")]
SecretsOpt = Annotated[
    Path | None,
    typer.Option("--secrets-dir", envvar="LANES_SECRETS_DIR", help="folder of secret files, one per secret name"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object")]
DaemonOpt = Annotated[
    str | None,
    typer.Option(
        "--daemon",
        envvar="LANES_DAEMON",
        help="URL of a running daemon's HTTP endpoint (e.g. http://127.0.0.1:9464): show its view; "
        "exit 1 if it does not answer or cannot write its journal",
    ),
]

DEFAULT_DB = Path(".lanes/lanes.db")
DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts").expanduser()
DEFAULT_KEY = Path("~/.ssh/id_ed25519").expanduser()


def plan_to_json(result: CycleResult) -> dict[str, Any]:
    return {
        "commit": result.commit,
        "changes": not result.plan.empty,
        "lanes": [
            {
                "name": lp.lane,
                "action": lp.action,
                "reason": lp.reason,
                "cause": lp.cause.value,
                "drift": [d.to_json() for d in lp.drift],
                "hosts": list(lp.hosts),
                "steps": [{"kind": s.kind, "describe": s.describe()} for s in lp.steps],
            }
            for lp in result.plan.lanes
        ],
        "unreachable": list(result.observed.unreachable()),
    }


ACTION_COLORS = {"deploy": "cyan", "verify": "cyan", "stop": "magenta", "noop": "green", "denied": "red", "fail": "red"}


def print_plan(result: CycleResult, console: Console) -> None:
    for lp in result.plan.lanes:
        color = ACTION_COLORS.get(lp.action, "yellow")
        console.print(f"[{color}]{lp.action:7}[/] [bold]{lp.lane}[/]: {lp.reason}", highlight=False)
        for i, step in enumerate(lp.steps, 1):
            console.print(f"          {i}. {step.describe()}", highlight=False)
    if result.plan.empty:
        console.print("[green]nothing to do[/]")


def print_status(rows: list[dict[str, Any]], console: Console) -> None:
    table = Table(title="lanes", title_justify="left")
    for col in ("lane", "desired", "health", "applied", "hosts", "ready in", "evidence", "last error or drift"):
        table.add_column(col, overflow="fold")
    colors = {
        "healthy": "green",
        "progressing": "cyan",
        "degraded": "yellow",
        "failed": "red",
        "denied": "red",
        "stopped": "dim",
        "blocked": "yellow",
    }
    for r in rows:
        ready = r["timings"].get("to_token")
        table.add_row(
            r["name"],
            r["desired"],
            f"[{colors.get(r['health'], '')}]{r['health']}[/]",
            (r["commit"] or "")[:10],
            ",".join(r["hosts"]),
            f"{ready:.1f} s" if ready else "",
            " ".join(v for k, v in r.get("evidence", {}).items() if k in {"pp", "tg"}),
            (r["last_error"] or drift_text(r.get("drift")))[:160],
        )
    console.print(table)


def make_runner(
    db: Path, known_hosts: Path, key: Path, secrets_dir: Path | None, settings: CycleSettings | None = None
) -> tuple[CycleRunner, Store, SSHTransport]:
    if not known_hosts.is_file():
        fail(f"known_hosts file {known_hosts} not found: pin every host key first (no trust on first use)")
    store = Store(db)
    transport = SSHTransport(known_hosts, [key])
    # The git-head mirrors `lanes upstream` keeps answer whether a build holds a known issue's fix.
    ancestry = partial(fix_ancestry, data_dir=UPSTREAM_DATA)
    runner = CycleRunner(transport, store, SecretStore(secrets_dir), settings or CycleSettings(), ancestry)
    return runner, store, transport


def progress_printer(console: Console) -> Any:
    t0 = time.monotonic()

    def show(event: ProgressEvent) -> None:
        mark = {"started": "…", "done": "✓", "failed": "✗"}.get(event.status, "·")
        console.print(
            f"[dim]{time.monotonic() - t0:7.1f}s[/] {mark} [bold]{event.lane}[/] {event.step}: {event.detail}",
            highlight=False,
        )

    return show


@handle_errors
def plan_cmd(
    repo: RepoOpt = ".",
    rev: RevOpt = "HEAD",
    db: DbOpt = DEFAULT_DB,
    known_hosts: KnownHostsOpt = DEFAULT_KNOWN_HOSTS,
    ssh_key: KeyOpt = DEFAULT_KEY,
    secrets_dir: SecretsOpt = None,
    as_json: JsonOpt = False,
    exit_code: Annotated[bool, typer.Option("--exit-code", help="exit 1 when changes are pending")] = False,
) -> None:
    """Show what apply would do: probe every host once, diff, print the steps."""
    loaded = load_commit(repo, rev)
    runner, store, transport = make_runner(db, known_hosts, ssh_key, secrets_dir)

    async def go() -> CycleResult:
        try:
            return await runner.run_cycle(loaded, apply=False, wait_backoff=False)
        finally:
            await transport.close()

    result = asyncio.run(go())
    store.close()
    if as_json:
        print(json.dumps(plan_to_json(result), indent=2))
    else:
        print_plan(result, Console())
    raise typer.Exit(EXIT_DENY if exit_code and not result.plan.empty else EXIT_OK)


@handle_errors
def apply_cmd(
    repo: RepoOpt = ".",
    rev: RevOpt = "HEAD",
    db: DbOpt = DEFAULT_DB,
    known_hosts: KnownHostsOpt = DEFAULT_KNOWN_HOSTS,
    ssh_key: KeyOpt = DEFAULT_KEY,
    secrets_dir: SecretsOpt = None,
    as_json: JsonOpt = False,
    lane: Annotated[list[str] | None, typer.Option("--lane", help="apply only this lane (repeatable)")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask before applying")] = False,
) -> None:
    """Converge the hosts toward a commit: ordered, health-gated, rolled back on failure."""
    loaded = load_commit(repo, rev)
    runner, store, transport = make_runner(db, known_hosts, ssh_key, secrets_dir)
    only = frozenset(lane) if lane else None
    console = Console(stderr=as_json)

    async def go() -> CycleResult:
        try:
            if not yes and not as_json:
                # A person confirms a plan first; the cycle then probes again, as time passed while they read.
                preview = await runner.run_cycle(loaded, apply=False, only_lanes=only, wait_backoff=False)
                if not preview.plan.empty:
                    print_plan(preview, console)
                    if not typer.confirm("apply these changes?"):
                        raise typer.Exit(EXIT_OK)
            # With nothing to change the cycle still runs: it records denied and blocked lanes in the journal.
            return await runner.run_cycle(loaded, only_lanes=only, progress=progress_printer(console),
                                          wait_backoff=False)
        finally:
            await transport.close()

    result = asyncio.run(go())
    rows = status_rows(store, loaded.desired)
    store.close()
    if as_json:
        print(
            json.dumps(
                {"commit": result.commit, "results": [r.__dict__ for r in result.results], "lanes": rows},
                indent=2,
                default=str,
            )
        )
    else:
        print_status(rows, console)
    raise typer.Exit(EXIT_OK if result.ok else EXIT_DENY)


@handle_errors
def status_cmd(
    repo: RepoOpt = ".",
    rev: RevOpt = "HEAD",
    db: DbOpt = DEFAULT_DB,
    daemon: DaemonOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Per lane: desired and applied commit, health, hosts, last error.

    With --daemon, the running daemon's view instead of a local journal, and what keeps it from converging.
    """
    view = ask_daemon(daemon) if daemon else None
    refused: dict[str, Any] | None = None  # the journal's newest decision, when it refused the head
    if view is not None and view.status is not None:
        rows: list[dict[str, Any]] = view.status["lanes"]
    else:
        desired: DesiredState | None = None
        try:
            desired = load_commit(repo, rev).desired
        except Exception:
            desired = None
        store = Store(db)
        rows = status_rows(store, desired)
        latest = store.latest_commit()
        store.close()
        if latest is not None and latest["outcome"] in ("refused", "invalid"):
            refused = {"commit": latest["sha"], "reason": latest["detail"].get("refused", ""), "time": latest["time"]}
    if as_json:
        out: dict[str, Any] = {"lanes": rows}
        if view is not None:
            out = {"daemon": view.as_json(), **out}
        if refused is not None:
            out["refused"] = refused
        print(json.dumps(out, indent=2, default=str))
    else:
        console = Console()
        if refused is not None:
            why = f"head {refused['commit'][:12]} refused: {refused['reason']}; the lanes keep what they run"
            console.print(f"[red]{escape(why)}[/]", highlight=False, soft_wrap=True)
        for color, text in trouble_lines(view) if view is not None else []:
            console.print(f"[{color}]{text}[/]", highlight=False, soft_wrap=True)
        print_status(rows, console)
    if view is not None and needs_attention(view):
        raise typer.Exit(EXIT_DENY)


@handle_errors
def retry_cmd(
    lane: Annotated[str, typer.Argument(help="lane whose failed spec may be tried again")], db: DbOpt = DEFAULT_DB
) -> None:
    """Allow a lane's failed spec to be applied again on the next apply or cycle."""
    store = Store(db)
    cleared = store.clear_failed(lane)
    store.close()
    print(f"{lane}: failed mark cleared" if cleared else f"{lane}: no failed spec recorded")
