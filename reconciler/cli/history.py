"""`lanes history [LANE]`: the audit trail of lanes, from git history and the daemon's journal.

Git says who changed what and when; the journal (`applies`) says what the
daemon did with each commit: applied, denied by a rule, failed with an
error, rolled back, with timings, and what had drifted when it repaired
drift. An apply at a head that did not change the lane (a drift repair at
a resync, most often) is shown under the lane's newest change at or
before that head, the change whose spec it applied. Where there is no journal at hand (a
laptop clone), the verdict notes the daemon pushed (`refs/notes/lanes`) say
the same, so both are shown.
"""

from __future__ import annotations

import bisect
import json
import re
import sqlite3
import time
from pathlib import Path
from typing import Annotated, Any

import pygit2
import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from reconciler.cli.common import err_console, fail, handle_errors
from reconciler.cli.daemonclient import WHERE, DaemonAddress, DaemonCallError, find_daemon
from reconciler.cli.notecheck import disagreement, read_decisions
from reconciler.cli.operate import ConfigOpt, DaemonOpt
from reconciler.cli.paths import DEFAULT_DB
from reconciler.cli.tables import Column, print_table
from reconciler.facts.enginelog import engine_words
from reconciler.source.gitread import open_repo, resolve
from reconciler.source.history import LaneChange, change_to_json, history, show_value
from reconciler.source.notes import parse_note

LaneArg = Annotated[
    str | None, typer.Argument(help="lane name (the file stem under state/lanes/); all lanes if omitted")
]
RepoOpt = Annotated[str, typer.Option("--repo", help="path of the state repository (or the daemon's mirror)")]
RevOpt = Annotated[str, typer.Option("--rev", help="walk first-parent history back from this commit")]
DbOpt = Annotated[
    Path | None,
    typer.Option("--db", envvar="LANES_DB", help="the daemon's sqlite journal (default: .lanes/lanes.db if present)"),
]
StateDirOpt = Annotated[str, typer.Option("--state-dir", help="folder of the state inside the repository")]
LimitOpt = Annotated[int, typer.Option("--limit", min=1, help="at most this many changes per lane")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object")]


Applies = dict[tuple[str, str], list[dict[str, Any]]]


def read_applies(db: Path) -> tuple[Applies, str | None]:
    """Rows of the journal's `applies` table by (lane, commit), oldest first, and why there are none.

    Opened read-only: looking at history must never create or migrate the daemon's database.
    """
    if not db.is_file():
        return {}, f"no journal at {db}"
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as exc:
        return {}, f"cannot open the journal {db}: {exc}"
    conn.row_factory = sqlite3.Row
    try:
        have = {row[1] for row in conn.execute("pragma table_info(applies)")}
        columns = 'run, lane, "commit", fingerprint, result, error, started, finished, timings'
        # cause and drift came later: a journal from before them is read without them.
        columns += "".join(f", {c}" for c in ("cause", "drift", "logs") if c in have)
        rows = conn.execute(f"select {columns} from applies order by id").fetchall()  # noqa: S608 - constant
    except sqlite3.Error as exc:
        return {}, f"cannot read the journal {db}: {exc}"
    finally:
        conn.close()
    out: Applies = {}
    for row in rows:
        entry = dict(row)
        try:
            entry["timings"] = json.loads(entry.get("timings") or "{}")
        except ValueError:
            entry["timings"] = {}
        try:
            entry["drift"] = json.loads(entry.get("drift") or "[]")
        except ValueError:
            entry["drift"] = []
        # The ranks' log tails stay in the journal (`lanes logs` reads live ones); their error lines come along.
        try:
            logs = json.loads(entry.pop("logs", None) or "{}")
        except ValueError:
            logs = {}
        entry["engine_error"] = engine_words(logs) if isinstance(logs, dict) else None
        out.setdefault((entry["lane"], entry["commit"]), []).append(entry)
    return out, None


def daemon_applies(found: DaemonAddress, lane: str | None) -> tuple[Applies, list[dict[str, Any]], str | None]:
    """The running daemon's apply rows by (lane, commit), oldest first, its runtime holds, and why there are none."""
    try:
        data = found.call("history", {"lane": lane} if lane else {})
    except DaemonCallError as exc:
        return {}, [], str(exc)
    out: Applies = {}
    for entry in data.get("applies") or ():
        if isinstance(entry, dict):
            out.setdefault((str(entry.get("lane")), str(entry.get("commit"))), []).append(entry)
    holds = [h for h in data.get("suspensions") or () if isinstance(h, dict)]
    return out, holds, None


def journal_holds(db: Path, lane: str | None) -> list[dict[str, Any]]:
    """The runtime holds a journal copy recorded (read-only; none when it has no such table)."""
    if not db.is_file():
        return []
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return []
    conn.row_factory = sqlite3.Row
    try:
        rows = conn.execute('select lane, action, "by", reason, at from suspensions order by id').fetchall()
    except sqlite3.Error:
        return []
    finally:
        conn.close()
    return [dict(r) for r in rows if lane is None or r["lane"] == lane]


def _note_verdicts(change: LaneChange) -> list[dict[str, Any]]:
    """This lane's entries of the verdicts in the commit's note."""
    out = []
    for verdict in parse_note(change.note):
        if verdict.get("refused"):
            out.append({"lane": change.lane, "result": "refused", "error": verdict["refused"]})
        out += [e for e in verdict.get("lanes") or () if isinstance(e, dict) and e.get("lane") == change.lane]
    return out


def first_parent_order(repository: pygit2.Repository, rev: str) -> dict[str, int]:
    """commit -> its place on the first-parent line from `rev` (0: `rev` itself), as `history` walks it."""
    order: dict[str, int] = {}
    commit: pygit2.Commit | None = resolve(repository, rev)
    while commit is not None:
        order[str(commit.id)] = len(order)
        commit = commit.parents[0] if commit.parents else None
    return order


def applies_by_change(changes: list[LaneChange], applies: Applies, order: dict[str, int]) -> dict[str, list[Any]]:
    """The journal's applies of one lane, by the change (commit) they belong to: their own commit's when it
    changed the lane, else the newest change of the lane at or before it, as evidence is attached.

    The daemon applies at the head, which most often changed another lane or nothing of this one: a drift
    repair at a resync, a retry. Such an apply belongs to the change whose spec it applied. Applies at a
    commit off the first-parent line (another branch) go only with their own commit.
    """
    if not changes:
        return {}
    lane = changes[0].lane
    own = {c.commit for c in changes}
    places = sorted((order[c.commit], c.commit) for c in changes if c.commit in order)
    out: dict[str, list[Any]] = {}
    for (name, commit), rows in applies.items():
        if name != lane:
            continue
        target = commit if commit in own else None
        if target is None and commit in order:
            at = bisect.bisect_left(places, (order[commit], ""))
            target = places[at][1] if at < len(places) else None
        if target is not None:
            out.setdefault(target, []).extend(rows)
    for rows in out.values():
        rows.sort(key=lambda row: float(row.get("started") or 0.0))
    return out


def entry_json(change: LaneChange, applies: list[dict[str, Any]]) -> dict[str, Any]:
    data = change_to_json(change)
    data["applies"] = applies
    data["verdicts"] = _note_verdicts(change)
    return data


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(epoch))


_COLORS = {
    "applied": "green",
    "verified": "green",
    "denied": "red",
    "failed": "red",
    "refused": "red",
    "rolled-back": "yellow",
}


def _outcome(entry: dict[str, Any]) -> str:
    lines = []
    for row in entry["applies"] or entry["verdicts"]:
        result = str(row.get("result") or "?")
        color = _COLORS.get(result, "cyan")
        text = f"[{color}]{result}[/]"
        if row.get("commit") and row["commit"] != entry["commit"]:
            text += f" at {str(row['commit'])[:12]}"  # a later head that left this change's spec as it was
        total = (row.get("timings") or {}).get("total")
        if total is not None:
            text += f" in {float(total):.1f} s"
        why = row.get("error")
        drift = row.get("drift") or []
        if drift:
            text += " (drift: " + escape("; ".join(f"{d['container']} {d['kind']} on {d['host']}" for d in drift)) + ")"
        if row.get("rule"):
            why = f"{row['rule']}: {why}" if why else row["rule"]
        engine = row.get("engine_error")
        if engine and engine not in str(why or ""):
            why = f"{why}; engine: {engine}" if why else f"engine: {engine}"
        if why:
            text += f": {escape(str(why))}"
        lines.append(text)
    if entry.get("note_disagrees"):
        lines.append(f"[bold red]note disagrees with the journal:[/] {escape(entry['note_disagrees'])}")
    return "\n".join(lines) or "[dim]no record[/]"


_ADDED_SUMMARY = ("desired", "engine", "image", "model", "hosts")
"""For a newly added lane the whole file is new; these fields say what it is."""


def _changes(entry: dict[str, Any]) -> str:
    lines = []
    for file in entry["files"]:
        is_lane = "/lanes/" in f"/{file['path']}"
        indent = "" if is_lane else "  "
        if not is_lane:
            lines.append(f"[dim]{file['path']}[/]")
        if file["error"]:
            lines.append(f"{indent}{file['status']} ({escape(file['error'])})")
            continue
        fields = file["fields"]
        if file["status"] != "modified":
            lines.append(f"{indent}[bold]{file['status']}[/]")
            if file["status"] == "removed":
                continue
            fields = [c for c in fields if c["field"] in _ADDED_SUMMARY] if is_lane else []
        lines.extend(f"{indent}{field_text(change)}" for change in fields)
    return "\n".join(lines)


_DIGEST = re.compile(r"(sha256:[0-9a-f]{12})[0-9a-f]{52}")


def field_text(change: dict[str, Any]) -> str:
    def show(value: Any) -> str:
        # A digest is told apart by its first 12 hex digits; the JSON output keeps all 64.
        text = _DIGEST.sub(r"\1…", show_value(value))
        return escape(text if len(text) <= 120 else text[:117] + "...")

    if change["kind"] == "added":
        return f"{escape(change['field'])}: {show(change['new'])}"
    if change["kind"] == "removed":
        return f"{escape(change['field'])}: {show(change['old'])} -> (unset)"
    return f"{escape(change['field'])}: {show(change['old'])} -> {show(change['new'])}"


def _change_cell(entry: dict[str, Any]) -> Text:
    """The commit's subject (dim), then its field changes."""
    parts = (f"[dim]{escape(entry['subject'])}[/]" if entry["subject"] else "", _changes(entry))
    return Text.from_markup("\n".join(p for p in parts if p))


def print_history(
    lanes: dict[str, list[dict[str, Any]]], console: Console, holds: list[dict[str, Any]] | None = None
) -> None:
    if not lanes:
        console.print("no lane changes found")
    # The change and what the daemon did are what a reader came for: they are the free text that wraps.
    columns = [
        Column("commit"),
        Column("when (UTC)"),
        Column("author"),
        Column("change", "text"),
        Column("daemon", "text"),
        Column("evidence", "text"),
    ]
    for name, entries in lanes.items():
        rows = [
            [
                entry["commit"][:12],
                _when(entry["time"]),
                entry["author"],
                _change_cell(entry),
                Text.from_markup(_outcome(entry)),
                "\n".join(Path(p).name for p in entry["evidence"]),
            ]
            for entry in entries
        ]
        print_table(console, columns, rows, title=Text(name, style="bold"))
        if not entries:
            console.print("no changes found", style="dim")
        for hold in [h for h in holds or () if h.get("lane") == name]:
            # Runtime holds (`lanes suspend` / `resume`) are no commit: they are listed after the changes.
            verb = "suspended" if hold.get("action") == "suspend" else "resumed"
            text = f"{_when(float(hold['at']))}  {verb} by {hold.get('by')}: {hold.get('reason')}"
            console.print(escape(text), style="yellow" if verb == "suspended" else "", highlight=False)
        console.print()


@handle_errors
def history_cmd(
    lane: LaneArg = None,
    repo: RepoOpt = ".",
    rev: RevOpt = "HEAD",
    db: DbOpt = None,
    state_dir: StateDirOpt = "state",
    limit: LimitOpt = 200,
    daemon: DaemonOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Every commit that changed a lane: who, when, which fields (old -> new), what the daemon did, evidence.

    What the daemon did comes from the running daemon when one is found, else from --db."""
    repository = open_repo(repo)
    changes = history(repository, {lane} if lane else None, rev=rev, state_dir=state_dir, limit=limit)
    if lane and lane not in changes:
        # No commit ever touched it: a typo, or a lane of another repository. Say which lanes there are.
        known = sorted(history(repository, None, rev=rev, state_dir=state_dir, limit=1))
        fail(f"no lane '{lane}' in the history of {rev} (known: {', '.join(known) or 'none'})", as_json=as_json)
    found = find_daemon(daemon, config) if db is None else None
    if found is not None:
        applies, holds, problem = daemon_applies(found, lane)
    else:
        applies, problem = read_applies(db if db is not None else DEFAULT_DB)
        holds = journal_holds(db if db is not None else DEFAULT_DB, lane)
        if problem and db is None and not DEFAULT_DB.exists():
            problem = f"no daemon and no journal found ({WHERE})"
    if problem:
        # Said on stderr so `--json` stays one object; the notes in git still say what the daemon did.
        err_console().print(
            f"[yellow]warning:[/] {escape(problem)}; showing git history and notes only", highlight=False
        )
    order = first_parent_order(repository, rev)
    decisions = read_decisions(db if db is not None else DEFAULT_DB)
    lanes = {}
    for name in sorted(changes):
        attached = applies_by_change(changes[name], applies, order)
        lanes[name] = [entry_json(c, attached.get(c.commit, [])) for c in changes[name]]
        for change, entry in zip(changes[name], lanes[name], strict=True):
            # Only with the journal at hand: without it the note is all there is, and is shown as such.
            entry["note_disagrees"] = None if decisions is None else disagreement(change.commit, change.note, decisions)
    if as_json:
        out = {"ok": True, "exit_code": 0, "lanes": lanes, "suspensions": holds}
        print(json.dumps(out, indent=2, default=str))
    else:
        print_history(lanes, Console(), holds)
