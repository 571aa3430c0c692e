"""What the rig tests read back from hosts and from lanes' output, and the lanes they push.

The tests look at hosts the way a person would: `docker inspect` over ssh
with the pinned host key, HTTP to the host's address, the sqlite journal.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from tests.rig.lanescli import LaneRun
from tests.rig.rig import Rig

QUAD_HOSTS = ("rig1", "rig2", "rig3", "rig4")
SOLO_HOST = "rig2"
SOLO_PORT = 8001


@dataclass(frozen=True)
class Running:
    """One container on a host, as `docker inspect` tells it."""

    host: str
    name: str
    id: str
    status: str
    labels: Mapping[str, str]
    image_digest: str
    image_name: str
    path: str
    args: tuple[str, ...]
    env: tuple[str, ...]
    mounts: tuple[tuple[str, str, bool], ...]
    started_at: str

    @property
    def spec(self) -> str:
        return self.labels.get("lanes.spec", "")


def running(rig: Rig, host: str) -> dict[str, Running]:
    """Every container on `host` by name (read over ssh)."""
    out = {}
    for c in rig.containers(host):
        cfg = c.get("Config") or {}
        out[c["Name"].lstrip("/")] = Running(
            host=host,
            name=c["Name"].lstrip("/"),
            id=c["Id"],
            status=c["State"]["Status"],
            labels=cfg.get("Labels") or {},
            image_digest=c.get("ImageDigest", ""),
            image_name=c.get("ImageName", ""),
            path=c.get("Path", ""),
            args=tuple(c.get("Args") or ()),
            env=tuple(cfg.get("Env") or ()),
            mounts=tuple((m["Source"], m["Destination"], bool(m["RW"])) for m in c.get("Mounts") or ()),
            started_at=c["State"].get("StartedAt", ""),
        )
    return out


def fleet_view(rig: Rig) -> dict[str, dict[str, Running]]:
    """Every host's containers, read over ssh from all hosts at once."""
    with ThreadPoolExecutor(len(rig.hosts)) as pool:
        return dict(zip(rig.hosts, pool.map(lambda h: running(rig, h), rig.hosts), strict=True))


def digest_of(ref: str) -> str:
    return ref.rsplit("@", 1)[1]


def quad_and_solo(
    rig: Rig,
    *,
    image_ref: str | None = None,
    quad_env: Mapping[str, str] | None = None,
    quad_health: Mapping[str, float] | None = None,
) -> dict[str, dict[str, Any]]:
    """The rig's example fleet: a 4-rank lane over every host and a 1-rank lane sharing rig2 on port 8001."""
    return {
        "quad": rig.lane("quad", QUAD_HOSTS, image_ref=image_ref, env=quad_env, health=quad_health),
        "solo": rig.lane("solo", [SOLO_HOST], port=SOLO_PORT),
    }


def result_of(run: LaneRun, lane: str) -> dict[str, Any]:
    for r in run.json()["results"]:
        if r["lane"] == lane:
            found: dict[str, Any] = r
            return found
    raise AssertionError(f"no result for lane {lane}:\n{run.describe()}")


def status_of(rig: Rig, lane: str) -> dict[str, Any]:
    run = rig.status()
    assert run.returncode == 0, run.describe()
    for row in run.json()["lanes"]:
        if row["name"] == lane:
            found: dict[str, Any] = row
            return found
    raise AssertionError(f"lane {lane} not in lanes status:\n{run.describe()}")


def statuses(rig: Rig) -> dict[str, dict[str, Any]]:
    """Every lane's row of `lanes status --json`, by lane (one run of the command)."""
    run = rig.status()
    assert run.returncode == 0, run.describe()
    return {row["name"]: row for row in run.json()["lanes"]}


def rows_of(run: LaneRun) -> dict[str, dict[str, Any]]:
    """The status rows `lanes apply --json` prints at its end (what `lanes status --json` would say then)."""
    return {row["name"]: row for row in run.json()["lanes"]}


def applies(rig: Rig, lane: str) -> list[dict[str, Any]]:
    """The journal's `applies` rows of a lane, newest last, `logs` and `timings` decoded."""
    with sqlite3.connect(rig.db) as db:
        db.row_factory = sqlite3.Row
        rows = [dict(r) for r in db.execute("SELECT * FROM applies WHERE lane = ? ORDER BY rowid", (lane,))]
    for row in rows:
        for key in ("logs", "timings"):
            if isinstance(row.get(key), str):
                row[key] = json.loads(row[key])
    return rows


def steps(rig: Rig, lane: str, commit: str | None = None) -> list[tuple[str, str]]:
    """The journal's steps of a lane (of one commit if given) as (kind, state), in the order they ran."""
    query = "SELECT kind, state FROM journal WHERE lane = ?" + (" AND `commit` = ?" if commit else "")
    with sqlite3.connect(rig.db) as db:
        rows = db.execute(query + " ORDER BY id", (lane, commit) if commit else (lane,)).fetchall()
    return [(str(kind), str(state)) for kind, state in rows]


def in_flight(rig: Rig) -> list[tuple[str, str]]:
    """Journal steps still marked started: (lane, kind). Empty once every transaction ended, however it ended."""
    with sqlite3.connect(rig.db) as db:
        rows = db.execute("SELECT lane, kind FROM journal WHERE state = 'started' ORDER BY id").fetchall()
    return [(str(lane), str(kind)) for lane, kind in rows]


def lane_row(rig: Rig, lane: str) -> dict[str, Any]:
    """The journal's `lanes` row of a lane, as stored."""
    with sqlite3.connect(rig.db) as db:
        db.row_factory = sqlite3.Row
        row = db.execute("SELECT * FROM lanes WHERE name = ?", (lane,)).fetchone()
    assert row is not None, f"no lanes row for {lane}"
    return dict(row)


MUTATING = frozenset({"run", "start", "stop", "rm", "kill", "pull", "restart", "create"})
"""`docker` subcommands that change a host (the probe's `ps` and `inspect` only look)."""


def docker_mark(rig: Rig) -> dict[str, int]:
    """Where each host's docker log ends now (see `docker_changes`)."""
    return {host: rig.docker_calls(host) for host in rig.hosts}


def docker_changes(rig: Rig, mark: Mapping[str, int]) -> dict[str, list[list[str]]]:
    """Per host, every docker command since `mark` that changes something (run, stop, rm, pull, ...)."""
    out: dict[str, list[list[str]]] = {}
    for host, seen in mark.items():
        log = rig.hosts[host].docker_log
        lines = log.read_text().splitlines()[seen:] if log.exists() else []
        argvs = [json.loads(line)["argv"] for line in lines]
        out[host] = [argv for argv in argvs if argv[:1] and argv[0] in MUTATING]
    return out


def served_models(address: str, port: int) -> list[str]:
    """What the engine on a host lists at /v1/models, over the rig network."""
    r = httpx.get(f"http://{address}:{port}/v1/models", timeout=5)
    r.raise_for_status()
    return [m["id"] for m in r.json()["data"]]


def deployed(rig: Rig, *extra: str) -> LaneRun:
    """`lanes apply` that must succeed (a test's starting point)."""
    run = rig.apply(*extra)
    assert run.returncode == 0, run.describe()
    return run


def converged(rig: Rig, *extra: str) -> LaneRun:
    """`lanes apply` that must succeed, then `lanes plan --exit-code` that must find nothing to do."""
    run = rig.apply(*extra)
    assert run.returncode == 0, run.describe()
    plan = rig.plan("--exit-code")
    assert plan.returncode == 0 and plan.json()["changes"] is False, plan.describe()
    return run
