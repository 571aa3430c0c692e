"""The daemon's control API: operators steer the running daemon, not a copy of its journal.

`lanes status`, `retry`, `suspend`, `resume`, `reconcile`, `wait` and `logs` talk to this, as
`flux suspend` / `flux reconcile` and `argocd app wait` talk to their controllers. It is mounted on the
daemon's own HTTP listener under `/control/` (loopback by default), every call a `POST` with a JSON
body and a JSON answer, and every call needs `Authorization: Bearer <token>` with the token of
`[http] control_token_file` (under systemd `$CREDENTIALS_DIRECTORY/control-token`, from
`LoadCredential=control-token:lanes.control-token`). There is no unauthenticated control, not even on
loopback: any local user can reach a loopback port, and a suspend stops the daemon from repairing a
lane. Without a token file the API is off (403 says how to turn it on). The token is read per request
(a rotated token needs no reload) and compared in constant time.

Why the HTTP listener and not a unix socket in a RuntimeDirectory: the listener already carries the
bounds a hostile client needs (connection cap, head/body/handler deadlines, body size), and the unit
runs with `PrivateUsers=true`, under which a connecting operator's uid is not the daemon's to check
(SO_PEERCRED shows the overflow uid); a token says who may act however the caller got there.

Every command only reads the daemon's state, writes one journal row (`suspensions`, the failed mark)
and kicks the trigger: nothing here changes a host. `logs` reads a rank's container output over the
daemon's own SSH transport, bounded in lines and bytes.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import structlog

from reconciler.daemon.http import Request, Response
from reconciler.daemon.trigger import LANE_KICK
from reconciler.errors import LanesError
from reconciler.execute.cycle import targets_for
from reconciler.facts import docker
from reconciler.facts.enginelog import engine_words
from reconciler.store.suspensions import resume, suspend, suspension_history

if TYPE_CHECKING:
    from reconciler.daemon.service import Daemon

log = structlog.get_logger("lanes.control")
PREFIX = "/control/"
REALM = 'Bearer realm="lanes control"'
WAIT_POLL_S = 0.5
WAIT_MAX_S = 20.0
"""One `wait` request holds at most this long (under the listener's handler deadline); the CLI asks again."""
MAX_TAIL = 5000
"""Lines of a rank's log one `logs` call returns at most."""
MAX_LOG_BYTES = 1 << 20
"""Bytes of a rank's log one `logs` call returns at most (the newest are kept)."""
LOGS_TIMEOUT_S = 15.0
FAILED_HEALTH = frozenset({"failed", "denied"})


def _answer(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    data = {"ok": 200 <= status < 300, **body}
    return Response(status, json.dumps(data, default=str).encode() + b"\n", "application/json", headers)


class ControlError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _refusal(daemon: Daemon, request: Request) -> Response | None:
    """None when the caller holds the control token; the refusal otherwise."""
    token_file = daemon.config.http.control_token_file
    if token_file is None:
        return _answer(403, {"error": "the control API is off: set [http] control_token_file (docs/control.md)"})
    try:
        token = token_file.read_bytes().strip()
    except OSError as exc:
        log.error("control.token_unreadable", path=str(token_file), error=exc.strerror)
        return _answer(503, {"error": "the control token is unreadable"})
    if not token:
        log.error("control.token_empty", path=str(token_file))  # an empty token would let anyone in
        return _answer(503, {"error": "the control token is empty"})
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token):
        log.warning("control.refused", path=request.path, had_token=bool(given.strip()))
        return _answer(401, {"error": "a valid bearer token is required"}, {"WWW-Authenticate": REALM})
    return None


def _body(request: Request) -> dict[str, Any]:
    if not request.body:
        return {}
    try:
        data = json.loads(request.body)
    except ValueError:
        raise ControlError(400, "the body is not JSON") from None
    if not isinstance(data, dict):
        raise ControlError(400, "the body is not a JSON object")
    return data


def _text(data: dict[str, Any], key: str, *, required: bool = False, limit: int = 500) -> str | None:
    value = data.get(key)
    if value is None or value == "":
        if required:
            raise ControlError(400, f"'{key}' is required")
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise ControlError(400, f"'{key}' must be a string of at most {limit} characters")
    return value


def _int(data: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ControlError(400, f"'{key}' must be a whole number from {low} to {high}")
    return value


def _known_lanes(daemon: Daemon) -> set[str]:
    desired = daemon.decider.last_desired
    return set(desired.lanes if desired else ()) | {r.name for r in daemon.store.lanes()}


def _lane(daemon: Daemon, data: dict[str, Any]) -> str:
    lane = _text(data, "lane", required=True, limit=200)
    assert lane is not None
    known = _known_lanes(daemon)
    if lane not in known:
        raise ControlError(404, f"no lane '{lane}' (known: {', '.join(sorted(known)) or 'none'})")
    return lane


def _row(daemon: Daemon, lane: str) -> dict[str, Any]:
    for row in daemon.status()["lanes"]:
        if row["name"] == lane:
            return dict(row)
    raise ControlError(404, f"no lane '{lane}'")


def _kick(daemon: Daemon) -> None:
    # `fetch`: look at the remote now (as `flux reconcile source`); `retry`: reconcile even at the same head.
    daemon.trigger.kick("fetch")
    daemon.trigger.kick("retry")


# -- commands ----------------------------------------------------------------------------


async def _status(daemon: Daemon, _data: dict[str, Any]) -> dict[str, Any]:
    return dict(daemon.status())


async def _retry(daemon: Daemon, data: dict[str, Any]) -> dict[str, Any]:
    lane = _lane(daemon, data)
    cleared = daemon.store.clear_failed(lane)
    log.info("control.retry", lane=lane, by=_text(data, "by", limit=100), cleared=cleared)
    _kick(daemon)
    return {"lane": lane, "cleared": cleared}


async def _suspend(daemon: Daemon, data: dict[str, Any]) -> dict[str, Any]:
    lane = _lane(daemon, data)
    reason = _text(data, "reason", required=True)
    by = _text(data, "by", limit=100) or "unknown"
    assert reason is not None
    held = suspend(daemon.store, lane, by, reason)
    log.info("control.suspend", lane=lane, by=held.by, reason=held.reason)
    _kick(daemon)  # the next cycle plans it as suspended: nothing of it is applied, repaired or rolled back
    return {"lane": lane, "suspension": held.as_json()}


async def _resume(daemon: Daemon, data: dict[str, Any]) -> dict[str, Any]:
    lane = _lane(daemon, data)
    by = _text(data, "by", limit=100) or "unknown"
    lifted = resume(daemon.store, lane, by)
    log.info("control.resume", lane=lane, by=by, was_held=lifted is not None)
    _kick(daemon)
    return {"lane": lane, "resumed": lifted is not None, "was": lifted.as_json() if lifted else None}


async def _reconcile(daemon: Daemon, data: dict[str, Any]) -> dict[str, Any]:
    lane = _lane(daemon, data) if data.get("lane") else None
    log.info("control.reconcile", lane=lane, by=_text(data, "by", limit=100))
    if lane is None:
        _kick(daemon)
    else:
        # That lane alone is planned and acted on (a new head the fetch finds is still decided in full).
        daemon.trigger.kick("fetch")
        daemon.trigger.kick(f"{LANE_KICK}{lane}")
    return {"kicked": True, "lane": lane, "head": daemon.last_head, "phase": daemon.phase}


GOOD = frozenset({"applied", "verified", "noop"})
BAD = frozenset({"failed", "rolled-back", "denied"})


def _outcome_at(daemon: Daemon, lane: str, want: str) -> str | None:
    """How the lane ended at the commit `want` (a prefix), as far as the daemon knows it now: the result of
    its operation when that commit's operations are still open, else of the last cycle at that commit."""
    if not want:
        return None
    decider = daemon.decider
    for sha, run in getattr(decider, "open", {}).items():
        if sha.startswith(want) and lane in run.results and lane not in run.open:
            return str(run.results[lane].result)
    last = decider.last_result
    if last is not None and last.commit.startswith(want):
        return next((str(r.result) for r in last.results if r.lane == lane), None)
    return None


def _judge(daemon: Daemon, lane: str, commit: str | None) -> tuple[str, str, dict[str, Any]]:
    """('healthy' | 'failed' | 'held' | 'waiting', why, row) for `wait`.

    A lane is at commit C when it was applied at C, or when the daemon's last finished cycle was at C and
    left the lane as it was (a commit that does not touch the lane: in sync with it, a noop). Without C,
    the commit is the daemon's head."""
    row = _row(daemon, lane)
    if row.get("suspension") or row.get("suspended"):
        return "held", "the lane is suspended: the daemon leaves it as it is", row
    if lane in daemon.decider.blocked:
        return "held", f"blocked: {daemon.decider.blocked[lane]}", row
    want = commit or (daemon.last_head or "")
    at = str(row.get("commit") or "")
    outcome = _outcome_at(daemon, lane, want)
    health = str(row.get("health"))
    if health == "healthy" and ((want and at.startswith(want)) or outcome in GOOD):
        return "healthy", f"healthy at {want[:12]} (runs {at[:12]})", row
    if outcome in BAD or (health in FAILED_HEALTH and want and at.startswith(want)):
        why = row.get("last_error") or outcome or health
        if row.get("engine_error") and row["engine_error"] not in why:
            why = f"{why}; engine: {row['engine_error']}"
        return "failed", str(why), row
    return "waiting", f"{health} at {at[:12] or 'nothing'}; daemon: {daemon.phase}", row


async def _wait(daemon: Daemon, data: dict[str, Any]) -> dict[str, Any]:
    lane = _lane(daemon, data)
    commit = _text(data, "commit", limit=64)
    if commit is not None and not all(c in "0123456789abcdef" for c in commit.lower()):
        raise ControlError(400, "'commit' must be a hexadecimal commit id (or a prefix of one)")
    hold = min(float(_int(data, "hold_s", int(WAIT_MAX_S), 0, int(WAIT_MAX_S))), WAIT_MAX_S)
    loop = asyncio.get_running_loop()
    until = loop.time() + hold
    while True:
        state, why, row = _judge(daemon, lane, commit.lower() if commit else None)
        if state != "waiting" or loop.time() >= until:
            return {"lane": lane, "state": state, "why": why, "row": row, "head": daemon.last_head}
        await asyncio.sleep(WAIT_POLL_S)


async def _logs(daemon: Daemon, data: dict[str, Any]) -> dict[str, Any]:
    lane = _lane(daemon, data)
    rank = _int(data, "rank", 0, 0, 1023)
    tail = _int(data, "tail", 200, 1, MAX_TAIL)
    desired = daemon.decider.last_desired
    spec = desired.lanes.get(lane) if desired else None
    if desired is None or spec is None:
        raise ControlError(404, f"lane '{lane}' is not in the commit the daemon last reconciled")
    if rank >= len(spec.hosts):
        raise ControlError(404, f"lane '{lane}' has ranks 0 to {len(spec.hosts) - 1}")
    host = spec.hosts[rank]
    name = f"lanes-{lane}-r{rank}"
    target = targets_for(desired, daemon.runner.settings.overrides)[host]
    try:
        result = await daemon.transport.run(target, docker.logs_argv(name, tail), timeout=LOGS_TIMEOUT_S, check=False)
    except LanesError as exc:
        raise ControlError(502, f"cannot read the logs of {name} on {host}: {exc}") from None
    # docker prints the container's stdout and stderr on its own; one log, bounded, the newest kept.
    text = (result.stdout + result.stderr)[-MAX_LOG_BYTES:]
    if result.exit_status != 0 and not result.stdout:
        raise ControlError(502, f"docker logs {name} on {host} failed: {result.stderr.strip()[-500:]}")
    return {
        "lane": lane,
        "rank": rank,
        "host": host,
        "container": name,
        "lines": text.splitlines()[-tail:],
        "engine_error": engine_words({f"{name}@{host}": text}),
    }


MAX_APPLIES = 5000


async def _history(daemon: Daemon, data: dict[str, Any]) -> dict[str, Any]:
    """The journal's apply rows (oldest first, the ranks' error lines instead of their whole tails) and the
    runtime holds, for `lanes history` on a machine where the journal is the daemon's alone."""
    lane = _lane(daemon, data) if data.get("lane") else None
    limit = _int(data, "limit", MAX_APPLIES, 1, MAX_APPLIES)
    rows = []
    for row in reversed(daemon.store.applies(lane, limit=limit)):
        entry = {k: v for k, v in row.items() if k != "logs"}
        try:
            logs = json.loads(row.get("logs") or "{}")
        except ValueError:
            logs = {}
        entry["engine_error"] = engine_words(logs) if isinstance(logs, dict) else None
        for key in ("timings", "drift"):
            try:
                entry[key] = json.loads(row.get(key) or ("{}" if key == "timings" else "[]"))
            except ValueError:
                entry[key] = {} if key == "timings" else []
        rows.append(entry)
    return {"applies": rows, "suspensions": suspension_history(daemon.store, lane)}


Command = Callable[["Daemon", dict[str, Any]], Awaitable[dict[str, Any]]]
COMMANDS: dict[str, Command] = {
    "status": _status,
    "retry": _retry,
    "suspend": _suspend,
    "resume": _resume,
    "reconcile": _reconcile,
    "wait": _wait,
    "logs": _logs,
    "history": _history,
}


def control_handler(daemon: Daemon) -> Callable[[Request], Awaitable[Response]]:
    """The `/control/<command>` route of the daemon's HTTP listener."""

    async def handle(request: Request) -> Response:
        refused = _refusal(daemon, request)
        if refused is not None:
            return refused
        command = COMMANDS.get(request.path.removeprefix(PREFIX))
        if command is None:
            return _answer(404, {"error": f"no command '{request.path}' (known: {', '.join(sorted(COMMANDS))})"})
        if request.method != "POST":
            return _answer(405, {"error": "control commands are POST"}, {"Allow": "POST"})
        try:
            return _answer(200, await command(daemon, _body(request)))
        except ControlError as exc:
            return _answer(exc.status, {"error": str(exc)})
        except ValueError as exc:
            return _answer(400, {"error": str(exc)})

    return handle
