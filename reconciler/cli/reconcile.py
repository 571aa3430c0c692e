"""`lanes plan`, `lanes apply`, `lanes status`, `lanes retry`: reconcile from a shell."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from reconciler.cli import exitcodes
from reconciler.cli.common import EXIT_DENY, LoadedCommit, fail, handle_errors, load_commit
from reconciler.cli.daemonclient import WHERE, DaemonCallError, find_daemon
from reconciler.cli.daemonview import ask_daemon, needs_attention, trouble_lines
from reconciler.cli.paths import DEFAULT_DB, UPSTREAM_DATA
from reconciler.cli.plandiff import lane_diffs
from reconciler.cli.planview import blocked_lanes, plan_to_json, print_plan, unreachable_hosts
from reconciler.cli.progress import StepPrinter
from reconciler.cli.tables import Column, print_table
from reconciler.errors import InputError
from reconciler.execute.cycle import CycleResult, CycleRunner, CycleSettings
from reconciler.execute.localorigin import LocalOrigins, forbidden_dirs
from reconciler.execute.results import Result
from reconciler.execute.secrets import SecretStore
from reconciler.source.gitread import open_repo
from reconciler.spec.load import DesiredState
from reconciler.store.journal import Store
from reconciler.store.status import held_text, staging_text, status_rows, suspension_text, trouble_text
from reconciler.transport.ssh import SSHTransport
from reconciler.upstream.ancestry import fix_ancestry

RepoOpt = Annotated[str, typer.Option("--repo", help="path of the state repository")]
RevOpt = Annotated[str, typer.Option("--rev", help="commit, branch or tag to reconcile toward")]
DbOpt = Annotated[Path, typer.Option("--db", envvar="LANES_DB", help="sqlite journal and status")]
KnownHostsOpt = Annotated[
    Path, typer.Option("--known-hosts", envvar="LANES_KNOWN_HOSTS", help="pinned host keys (no trust on first use)")
]
KeyOpt = Annotated[Path, typer.Option("--ssh-key", envvar="LANES_SSH_KEY", help="private key for the hosts")]
OriginRootOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--origin-root",
        metavar="DIR",
        help="a folder of this machine a model's `origin: {path}` may be under (repeatable; none: no local origin "
        "is sent). As the daemon's [ssh] origin_roots: the commit never decides what of this machine is sent",
    ),
]


def local_origins(roots: list[Path] | None, *held: Path | None, folders: tuple[Path | None, ...] = ()) -> LocalOrigins:
    """The operator's origin roots, with the folders of the key, known_hosts, journal and secrets kept out."""
    for root in roots or ():
        if not root.is_absolute() or root == Path("/"):
            raise InputError(f"{root} is not an absolute folder below /", field="--origin-root")
    kept = forbidden_dirs(list(held), folders)
    for root in roots or ():
        real = Path(os.path.realpath(root))
        for folder in kept:
            other = Path(os.path.realpath(folder))
            if real == other or real in other.parents or other in real.parents:
                raise InputError(f"{root} overlaps {folder} (credentials or state)", field="--origin-root")
    return LocalOrigins(tuple(roots or ()), kept)


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

JournalOpt = Annotated[
    Path | None,
    typer.Option("--db", envvar="LANES_DB", help="read this journal copy instead of asking the daemon"),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config", envvar="LANES_CONFIG", help="the daemon's settings, to find it (default /etc/lanes/reconciler.toml)"
    ),
]

DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts").expanduser()
DEFAULT_KEY = Path("~/.ssh/id_ed25519").expanduser()


def plan_exit(result: CycleResult, only: frozenset[str] | None, *, detailed: bool) -> int:
    """The exit code of `plan` (see `reconciler.cli.exitcodes`): blocked, then denied or failing, then changes."""
    if blocked_lanes(result) or unreachable_hosts(result, only):
        return exitcodes.BLOCKED
    if any(lp.action in {"denied", "fail"} for lp in result.plan.lanes):
        return exitcodes.FAILED
    return exitcodes.CHANGES if detailed and not result.plan.empty else exitcodes.OK


def print_status(rows: list[dict[str, Any]], console: Console) -> None:
    colors = {
        "healthy": "green",
        "progressing": "cyan",
        "degraded": "yellow",
        "failed": "red",
        "denied": "red",
        "stopped": "dim",
        "blocked": "yellow",
    }
    columns = [
        Column("lane", "key"),
        Column("desired"),
        Column("health"),
        Column("applied"),
        Column("hosts"),
        Column("ready in", "num"),
        Column("evidence"),
        Column("last error or drift", "text"),
    ]
    table = []
    for r in rows:
        ready = r["timings"].get("to_token")
        # No record at all (no journal, or a lane it never saw): nothing is progressing, it was never applied.
        health = r["health"]  # the JSON's word: a lane never applied says so beside it, not instead of it
        never = (
            " (never applied)" if r.get("never_applied", r.get("updated") is None) and r["desired"] == "running" else ""
        )
        suspended = " (suspended)" if r.get("suspended") else ""  # a person's lane: its health as last seen
        table.append(
            [
                r["name"],
                r["desired"],
                Text(health + never + suspended, style=colors.get(health, "")),
                (r["commit"] or "")[:10],
                ",".join(r["hosts"]),
                f"{ready:.1f} s" if ready else "",
                " ".join(v for k, v in r.get("evidence", {}).items() if k in {"pp", "tg"}),
                suspension_text(r) or staging_text(r.get("staging")) or held_text(r) or trouble_text(r),
            ]
        )
    print_table(console, columns, table, title=Text("lanes", style="bold"))


def make_runner(
    db: Path,
    known_hosts: Path,
    key: Path,
    secrets_dir: Path | None,
    settings: CycleSettings | None = None,
    *,
    as_json: bool = False,
    origin_roots: list[Path] | None = None,
) -> tuple[CycleRunner, Store, SSHTransport]:
    if not known_hosts.is_file():
        fail(
            f"known_hosts file {known_hosts} not found: pin every host key first (no trust on first use)",
            as_json=as_json,
        )
    store = Store(db)
    transport = SSHTransport(known_hosts, [key])
    # The git-head mirrors `lanes upstream` keeps answer whether a build holds a known issue's fix.
    ancestry = partial(fix_ancestry, data_dir=UPSTREAM_DATA)
    # Staging a model copies with rsync over ssh, with the same key and pinned host keys as every command.
    origins = local_origins(origin_roots, key, known_hosts, db, folders=(secrets_dir,))
    settings = replace(settings or CycleSettings(), ssh_key=key, known_hosts=known_hosts, origins=origins)
    runner = CycleRunner(transport, store, SecretStore(secrets_dir), settings, ancestry)
    return runner, store, transport


def check_lanes(loaded: LoadedCommit, lanes: list[str] | None, as_json: bool) -> frozenset[str] | None:
    """--lane names, each a lane of the commit (or one its hosts may still run: a removed lane)."""
    if not lanes:
        return None
    unknown = sorted(set(lanes) - set(loaded.desired.lanes))
    if unknown:
        known = ", ".join(sorted(loaded.desired.lanes)) or "none"
        fail(f"no lane {', '.join(unknown)} at {loaded.commit[:12]} (known: {known})", as_json=as_json, field="--lane")
    return frozenset(lanes)


LaneOpt = Annotated[list[str] | None, typer.Option("--lane", metavar="NAME", help="only this lane (repeatable)")]


@handle_errors
def plan_cmd(
    repo: RepoOpt = ".",
    rev: RevOpt = "HEAD",
    db: DbOpt = DEFAULT_DB,
    known_hosts: KnownHostsOpt = DEFAULT_KNOWN_HOSTS,
    ssh_key: KeyOpt = DEFAULT_KEY,
    secrets_dir: SecretsOpt = None,
    as_json: JsonOpt = False,
    lane: LaneOpt = None,
    exit_code: Annotated[
        bool,
        typer.Option(
            "--exit-code",
            "--detailed-exitcode",
            help="exit 3 when changes are pending (0 none); a blocked lane or unreachable host exits 4 either way",
        ),
    ] = False,
) -> None:
    """Show what apply would do: probe every host once, diff (field by field), print the steps.

    Exit 0 nothing to do (or changes, without --exit-code), 3 changes pending with --exit-code,
    4 a host unreachable or a lane blocked (never "nothing to do"), 1 a lane denied or failing, 2 bad input.
    """
    loaded = load_commit(repo, rev)
    only = check_lanes(loaded, lane, as_json)
    runner, store, transport = make_runner(db, known_hosts, ssh_key, secrets_dir, as_json=as_json)

    async def go() -> CycleResult:
        try:
            return await runner.run_cycle(loaded, apply=False, only_lanes=only, wait_backoff=False)
        finally:
            await transport.close()

    try:
        result = asyncio.run(go())
        diffs = lane_diffs(open_repo(repo), result, store)
    finally:
        store.close()
    code = plan_exit(result, only, detailed=exit_code)
    if as_json:
        print(json.dumps(plan_to_json(result, diffs, only, code), indent=2, default=str))
    else:
        print_plan(result, Console(), diffs, only)
    raise typer.Exit(code)


def apply_exit(result: CycleResult, only: frozenset[str] | None) -> int:
    """4 when a lane was blocked or a host did not answer (as `plan`), else 1 when a lane did not converge."""
    if any(r.result == Result.BLOCKED for r in result.results) or unreachable_hosts(result, only):
        return exitcodes.BLOCKED
    return exitcodes.OK if result.ok else exitcodes.FAILED


NOT_ASKED = (
    "apply changes the fleet and asks first; {why}: pass --yes (-y) to apply without asking, "
    "or run `lanes plan` to see what it would do"
)


@handle_errors
def apply_cmd(
    repo: RepoOpt = ".",
    rev: RevOpt = "HEAD",
    db: DbOpt = DEFAULT_DB,
    known_hosts: KnownHostsOpt = DEFAULT_KNOWN_HOSTS,
    ssh_key: KeyOpt = DEFAULT_KEY,
    secrets_dir: SecretsOpt = None,
    origin_root: OriginRootOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print one JSON object (never asks: needs --yes to apply)")
    ] = False,
    lane: LaneOpt = None,
    yes: Annotated[
        bool,
        typer.Option("--yes", "-y", help="apply without asking; needed without a terminal and with --json"),
    ] = False,
    now: Annotated[
        bool, typer.Option("--now", help="changes that restart a running lane go now, outside its change window too")
    ] = False,
) -> None:
    """Converge the hosts toward a commit: ordered, health-gated, rolled back on failure.

    On a terminal it shows the plan and asks before changing anything. Without a terminal, or with
    --json, it asks nobody: it refuses (exit 6) unless --yes. Exit 0 converged, 1 a lane failed or was
    denied, 4 a host unreachable or a lane blocked, 6 not confirmed, 2 bad input.
    """
    if not yes and (as_json or not sys.stdin.isatty()):
        why = "--json never asks" if as_json else "there is no terminal to ask on"
        fail(NOT_ASKED.format(why=why), exitcodes.NOT_CONFIRMED, as_json=as_json)
    loaded = load_commit(repo, rev)
    only = check_lanes(loaded, lane, as_json)
    runner, store, transport = make_runner(
        db, known_hosts, ssh_key, secrets_dir, as_json=as_json, origin_roots=origin_root
    )
    console = Console(stderr=as_json)

    async def go() -> CycleResult | None:
        try:
            if not yes:
                # A person confirms a plan first; the cycle then probes again, as time passed while they read.
                preview = await runner.run_cycle(loaded, apply=False, only_lanes=only, wait_backoff=False, now=now)
                if not preview.plan.empty:
                    print_plan(preview, console, lane_diffs(open_repo(repo), preview, store), only)
                    if not typer.confirm("apply these changes?", err=True):
                        return None
            # With nothing to change the cycle still runs: it records denied and blocked lanes in the journal.
            with StepPrinter(console) as show:
                return await runner.run_cycle(loaded, only_lanes=only, progress=show, wait_backoff=False, now=now)
        finally:
            await transport.close()

    try:
        result = asyncio.run(go())
        rows = status_rows(store, loaded.desired) if result is not None else []
    finally:
        store.close()
    if result is None:
        fail("not applied: nothing was changed", exitcodes.NOT_CONFIRMED)
    code = apply_exit(result, only)
    if as_json:
        out = {
            "ok": code == exitcodes.OK,
            "exit_code": code,
            "commit": result.commit,
            "results": [r.__dict__ for r in result.results],
            "blocked": blocked_lanes(result),
            "unreachable": unreachable_hosts(result, only),
            "lanes": rows,
        }
        print(json.dumps(out, indent=2, default=str))
    else:
        print_status(rows, Console())
    raise typer.Exit(code)


@handle_errors
def status_cmd(
    repo: RepoOpt = ".",
    rev: RevOpt = "HEAD",
    db: JournalOpt = None,
    daemon: DaemonOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Per lane: desired and applied commit, health, hosts, last error (the engine's own words with it).

    Asks the running daemon when one is found (--daemon, LANES_DAEMON, --config or
    /etc/lanes/reconciler.toml), with what keeps it from converging; --db reads a journal copy instead.
    """
    if daemon is None and db is None:
        found = find_daemon(None, config)
        daemon = found.url if found is not None else None
        if daemon is None and not DEFAULT_DB.is_file():
            fail(f"no daemon and no journal found: {WHERE}", as_json=as_json, field="--db")
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
        store = Store(db or DEFAULT_DB)
        rows = status_rows(store, desired)
        latest = store.latest_commit()
        store.close()
        if latest is not None and latest["outcome"] in ("refused", "invalid"):
            refused = {"commit": latest["sha"], "reason": latest["detail"].get("refused", ""), "time": latest["time"]}
    code = EXIT_DENY if view is not None and needs_attention(view) else exitcodes.OK
    if as_json:
        out: dict[str, Any] = {"ok": code == exitcodes.OK, "exit_code": code, "lanes": rows}
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
            console.print(f"[{color}]{escape(text)}[/]", highlight=False, soft_wrap=True)
        print_status(rows, console)
    if code != exitcodes.OK:
        raise typer.Exit(code)


@handle_errors
def retry_cmd(
    lane: Annotated[str, typer.Argument(metavar="LANE", help="lane whose failed spec may be tried again")],
    db: JournalOpt = None,
    daemon: DaemonOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Allow a lane's failed spec to be applied again (exit 2: no such lane).

    Asks the running daemon when one is found (it reconciles at once); --db clears the mark in a journal.
    """
    found = find_daemon(daemon, config) if db is None else None
    if found is not None:
        try:
            cleared = bool(found.call("retry", {"lane": lane})["cleared"])
        except DaemonCallError as exc:
            fail(str(exc), exitcodes.BAD_INPUT if exc.status in (400, 404) else exitcodes.FAILED, as_json=as_json)
    else:
        journal = db or DEFAULT_DB
        if not journal.is_file():
            fail(f"no daemon found and no journal at {journal}: {WHERE}", as_json=as_json, field="--db")
        store = Store(journal)
        try:
            known = sorted(r.name for r in store.lanes())
            if lane not in known:
                fail(
                    f"no lane '{lane}' in the journal {journal} (known: {', '.join(known) or 'none'})", as_json=as_json
                )
            cleared = store.clear_failed(lane)
        finally:
            store.close()
    if as_json:
        print(json.dumps({"ok": True, "exit_code": exitcodes.OK, "lane": lane, "cleared": cleared}))
    else:
        print(f"{lane}: failed mark cleared" if cleared else f"{lane}: no failed spec recorded")
