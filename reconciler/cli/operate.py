"""`lanes suspend`, `resume`, `reconcile`, `wait`, `logs`: steer the running daemon through its control API.

Each asks the daemon (`reconciler.cli.daemonclient` finds it) and prints what it answered; with
`--json` one object with `ok` and `exit_code`. Exit codes of `wait` (as `argocd app wait`, which
exits non-zero on a timeout or a degraded app): 0 the lane is healthy at the commit, 1 it failed or
was denied there (the reason printed, the engine's own words with it), 4 it is suspended or blocked
and will not converge by itself, 5 the daemon did not answer, 7 the timeout ran out first.
"""

from __future__ import annotations

import getpass
import json
import os
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from reconciler.cli import exitcodes
from reconciler.cli.common import fail, handle_errors
from reconciler.cli.daemonclient import WHERE, DaemonAddress, DaemonCallError, find_daemon

LaneArg = Annotated[str, typer.Argument(metavar="LANE", help="the lane's name (its file stem under state/lanes/)")]
DaemonOpt = Annotated[
    str | None,
    typer.Option("--daemon", envvar="LANES_DAEMON", help="URL of the daemon's HTTP endpoint (default: from --config)"),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config", envvar="LANES_CONFIG", help="the daemon's TOML settings (default /etc/lanes/reconciler.toml)"
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object")]

FOLLOW_POLL_S = 1.0
FOLLOW_MAX_S = 3600.0
"""`logs --follow` ends by itself after this long (--for): a forgotten terminal does not poll forever."""


def daemon_or_fail(daemon: str | None, config: Path | None, as_json: bool) -> DaemonAddress:
    found = find_daemon(daemon, config)
    if found is None:
        fail(f"no daemon found: {WHERE}", exitcodes.BAD_INPUT, as_json=as_json, field="--daemon")
    return found


def _who() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container): say the uid
        return f"uid {os.getuid()}"


def _call(found: DaemonAddress, command: str, body: dict[str, Any], as_json: bool) -> dict[str, Any]:
    try:
        return found.call(command, body)
    except DaemonCallError as exc:
        code = exitcodes.UNAVAILABLE if exc.status == 0 else exitcodes.BAD_INPUT if exc.status in (400, 404) else 1
        fail(str(exc), code, as_json=as_json)


def _done(data: dict[str, Any], text: str, as_json: bool, code: int = exitcodes.OK) -> NoReturn:
    if as_json:
        print(json.dumps({**data, "ok": code == exitcodes.OK, "exit_code": code}, indent=2, default=str))
    else:
        Console().print(escape(text), highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@handle_errors
def suspend_cmd(
    lane: LaneArg,
    reason: Annotated[str, typer.Option("--reason", help="why (shown to everyone with the lane's status)")],
    daemon: DaemonOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Hold a lane now: the daemon applies, repairs and rolls back nothing of it until `lanes resume`."""
    found = daemon_or_fail(daemon, config, as_json)
    data = _call(found, "suspend", {"lane": lane, "reason": reason, "by": _who()}, as_json)
    held = data["suspension"]
    _done(data, f"{lane}: suspended by {held['by']} at {held['at']}: {held['reason']}", as_json)


@handle_errors
def resume_cmd(lane: LaneArg, daemon: DaemonOpt = None, config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """Lift a runtime hold (`lanes suspend`); the daemon reconciles the lane at once."""
    found = daemon_or_fail(daemon, config, as_json)
    data = _call(found, "resume", {"lane": lane, "by": _who()}, as_json)
    text = f"{lane}: resumed" if data["resumed"] else f"{lane}: was not suspended at runtime"
    _done(data, text, as_json)


@handle_errors
def reconcile_cmd(
    lane: Annotated[str | None, typer.Option("--lane", help="the lane to look at (a cycle covers every lane)")] = None,
    daemon: DaemonOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Reconcile now: the daemon fetches the branch and runs a cycle at once (as `flux reconcile`)."""
    found = daemon_or_fail(daemon, config, as_json)
    body: dict[str, Any] = {"by": _who()}
    if lane:
        body["lane"] = lane
    data = _call(found, "reconcile", body, as_json)
    then = f"; `lanes wait {lane}` waits for it" if lane else ""
    _done(data, f"reconcile requested (daemon: {data.get('phase')}){then}", as_json)


@handle_errors
def wait_cmd(
    lane: LaneArg,
    commit: Annotated[str | None, typer.Option("--commit", help="healthy at this commit (a prefix will do)")] = None,
    timeout: Annotated[float, typer.Option("--timeout", min=1, help="give up after this many seconds")] = 600,
    daemon: DaemonOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Return when the lane is healthy (at --commit): exit 0; 1 failed there, 4 held, 5 no daemon, 7 timed out."""
    found = daemon_or_fail(daemon, config, as_json)
    deadline = time.monotonic() + timeout
    while True:
        hold = max(0, min(20, int(deadline - time.monotonic())))
        body: dict[str, Any] = {"lane": lane, "hold_s": hold}
        if commit:
            body["commit"] = commit
        data = _call(found, "wait", body, as_json)
        state, why = data["state"], data["why"]
        if state == "healthy":
            _done(data, f"{lane}: {why}", as_json)
        if state == "failed":
            _done(data, f"{lane}: failed: {why}", as_json, exitcodes.FAILED)
        if state == "held":
            _done(data, f"{lane}: will not converge by itself: {why}", as_json, exitcodes.BLOCKED)
        if time.monotonic() >= deadline:
            _done(data, f"{lane}: timed out after {timeout:.0f} s: {why}", as_json, exitcodes.TIMED_OUT)


def _new_lines(seen: list[str], lines: list[str]) -> list[str]:
    """The lines of `lines` after the longest overlap of its start with the end of `seen`."""
    for k in range(min(len(seen), len(lines)), 0, -1):
        if seen[-k:] == lines[:k]:
            return lines[k:]
    return lines


@handle_errors
def logs_cmd(
    lane: LaneArg,
    rank: Annotated[int, typer.Option("--rank", min=0, help="which rank (0: the head)")] = 0,
    tail: Annotated[int, typer.Option("--tail", min=1, max=5000, help="lines from the end")] = 200,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing new lines")] = False,
    follow_for: Annotated[
        float, typer.Option("--for", min=1, max=FOLLOW_MAX_S, help="with --follow: stop after this many seconds")
    ] = FOLLOW_MAX_S,
    daemon: DaemonOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A rank's engine output, read by the daemon over its own SSH connection (`docker logs`, bounded)."""
    found = daemon_or_fail(daemon, config, as_json)
    body: dict[str, Any] = {"lane": lane, "rank": rank, "tail": tail}
    data = _call(found, "logs", body, as_json)
    if as_json and not follow:
        _done(data, "", as_json)
    seen: list[str] = list(data["lines"])
    for line in seen:
        print(line) if not as_json else print(json.dumps({"line": line}))
    if not follow:
        raise typer.Exit(exitcodes.OK)
    until = time.monotonic() + follow_for
    while time.monotonic() < until:
        time.sleep(FOLLOW_POLL_S)
        lines = _call(found, "logs", {**body, "tail": 500}, as_json)["lines"]
        for line in _new_lines(seen, lines):
            print(line, flush=True) if not as_json else print(json.dumps({"line": line}), flush=True)
        seen = (seen + _new_lines(seen, lines))[-5000:]
    raise typer.Exit(exitcodes.OK)
