"""Worlds for the control-node fault matrix: daemons as real processes over simulated Sparks.

A `ControlWorld` is the example fleet on simulated hosts (in this process), a state repo, and one or
more real daemon processes (`python -m reconciler.cli.main daemon --config`), each with its own
config, sqlite file, mirror, HTTP port and JSON log. Faults are real: a tmpfs that fills up under the
journal, a remote repository that disappears, a branch force-pushed, a second daemon with its own
lease owner. Tests read the end state from the hosts (`containers`), from each daemon's sqlite file
(read-only connections), from `lanes status --json` (the real CLI, as a process), and from the
daemon's HTTP endpoint and log.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pygit2
import pytest

from reconciler.cli.demo import DemoEnv, stop_demo
from reconciler.facts.commands import LEASE_MARKER, command_marker
from tests.daemon.harness import (
    EUGR,
    EUGR_HOSTS,
    PROD_HOSTS,
    PRODUCTION,
    StateRepo,
    fast_files,
    free_port,
    lane_health,
    run_lanes,
    sim_for_example,
    spawn_daemon,
    wait_for,
    write_config,
)

CONVERGE_S = 120.0  # generous: two cores shared with other test runs
MUTATING = frozenset({"run", "stop", "rm", "pull"})


class Box(NamedTuple):
    name: str
    status: str
    commit: str
    image: str


class Act(NamedTuple):
    """A command that changed a simulated host, and who held that host's lease when it ran."""

    host: str
    verb: str
    name: str
    holder: str | None


@dataclass
class DaemonProc:
    """One `lanes daemon` process: its files, its HTTP endpoint, its log."""

    name: str
    dir: Path
    config: Path
    port: int
    owner: str
    db: Path
    proc: asyncio.subprocess.Process | None = None

    @property
    def log(self) -> Path:
        return self.dir / "daemon.log"

    async def start(self) -> None:
        self.proc = await spawn_daemon(self.config, self.log)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def stop(self) -> int:
        """SIGTERM and wait: the daemon must exit 0."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.proc.wait(), 60)
        self.proc = None
        return code

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()
        self.proc = None

    # -- the log -----------------------------------------------------------------

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines() if self.log.exists() else []:
            with contextlib.suppress(ValueError):
                data = json.loads(line)
                if isinstance(data, dict) and (name is None or data.get("event") == name):
                    out.append(data)
        return out

    # -- HTTP ----------------------------------------------------------------------

    async def get(self, path: str) -> tuple[int, str]:
        async with httpx.AsyncClient(timeout=30) as client:
            response = await client.get(f"http://127.0.0.1:{self.port}{path}")
        return response.status_code, response.text

    async def status(self) -> dict[str, Any]:
        code, text = await self.get("/status")
        assert code == 200, text
        data: dict[str, Any] = json.loads(text)
        return data

    async def metric(self, name: str) -> float:
        _, text = await self.get("/metrics")
        for line in text.splitlines():
            if line.startswith((name + " ", name + "{")):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"{name} not in /metrics")

    # -- its sqlite file (read-only) --------------------------------------------

    def rows(self, sql: str, *args: object) -> list[dict[str, Any]]:
        if not self.db.exists():
            return []
        with contextlib.closing(sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)) as conn:
            conn.row_factory = sqlite3.Row
            try:
                return [dict(r) for r in conn.execute(sql, args)]
            except sqlite3.OperationalError:
                return []

    def lane_row(self, lane: str) -> dict[str, Any]:
        found = self.rows("select * from lanes where name = ?", lane)
        return found[0] if found else {}

    def health(self, lane: str) -> tuple[str | None, str | None]:
        return lane_health(self.db, lane)

    def unfinished_steps(self) -> list[dict[str, Any]]:
        return self.rows("select * from journal where state = 'started'")

    def journal(self, lane: str, commit: str) -> list[dict[str, Any]]:
        return self.rows("select * from journal where lane = ? and [commit] = ? order by id", lane, commit)

    def applies(self, lane: str, commit: str) -> list[dict[str, Any]]:
        return self.rows("select * from applies where lane = ? and [commit] = ? order by id", lane, commit)

    def outcome(self, sha: str) -> str | None:
        found = self.rows("select outcome from commits where sha = ?", sha)
        return str(found[0]["outcome"]) if found else None

    def integrity(self) -> str:
        with contextlib.closing(sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)) as conn:
            return str(conn.execute("pragma integrity_check").fetchone()[0])

    async def converged(
        self, head: str, lanes: Sequence[str] = (PRODUCTION, EUGR), timeout: float = CONVERGE_S
    ) -> None:
        await wait_for(
            lambda: all(self.health(lane) == ("healthy", head) for lane in lanes),
            timeout,
            f"{self.name}: {', '.join(lanes)} healthy at {head[:12]}",
            0.1,
        )


@dataclass
class ControlWorld:
    tmp: Path
    env: DemoEnv
    repo: StateRepo
    daemons: list[DaemonProc] = field(default_factory=list)
    acts: list[Act] = field(default_factory=list)

    def commit(
        self, message: str, changes: dict[str, dict[str, Any]] | None = None, *, parents: list[str] | None = None
    ) -> str:
        """Commit the example state with `changes` per lane onto the branch (`parents`: a force-push)."""
        return self.repo.commit(fast_files(**(changes or {})), message, parents=parents)

    def image(self, tag: str, load_s: float = 0.5) -> str:
        """A new engine image in the simulated registry (its stand-in loads in `load_s`)."""
        return self.env.fleet.registry.add(
            f"aidendle94/sparkrun-sglang-dsv41-gb10:{tag}", env={"STANDIN_LOAD_S": str(load_s)}
        ).pinned

    def daemon(
        self,
        name: str,
        *,
        url: str | None = None,
        db: Path | None = None,
        fetch_s: float = 30,
        extra: str = "",
    ) -> DaemonProc:
        """A daemon config of its own (owner `lanes-<name>`), not started yet."""
        where = self.tmp / name
        where.mkdir(parents=True, exist_ok=True)
        port = free_port()
        config = write_config(where, self.repo.path, self.env, http_port=port, fetch_s=fetch_s, extra=extra)
        text = config.read_text().replace('owner = "lanes-test"', f'owner = "lanes-{name}"')
        text = text.replace('log_level = "warning"', 'log_level = "info"')
        if url is not None:
            text = text.replace(f'url = "{self.repo.path}"', f'url = "{url}"')
        if db is not None:
            text = text.replace(f'db = "{where / "daemon.db"}"', f'db = "{db}"')
        config.write_text(text)
        d = DaemonProc(name, where, config, port, f"lanes-{name}", db or where / "daemon.db")
        self.daemons.append(d)
        return d

    # -- the hosts ------------------------------------------------------------------

    def containers(self, host: str) -> list[Box]:
        return sorted(
            Box(name, c.status, c.labels.get("lanes.commit", ""), c.image_ref)
            for name, c in self.env.fleet.runtime(host).containers.items()
        )

    def lane_runs(self, lane: str, hosts: Sequence[str], commit: str, image: str) -> bool:
        """Exactly the lane's ranks, one per host in order, running `image` from `commit`, and nothing else."""
        return all(
            self.containers(h) == [Box(f"lanes-{lane}-r{rank}", "running", commit, image)]
            for rank, h in enumerate(hosts)
        )

    def image_of(self, lane: str) -> str:
        host = PROD_HOSTS[0] if lane == PRODUCTION else EUGR_HOSTS[0]
        return self.env.fleet.runtime(host).containers[f"lanes-{lane}-r0"].image_ref

    def slow(self, hosts: Sequence[str], command: str, seconds: float) -> None:
        for host in hosts:
            self.env.fleet.runtime(host).latency[command] = seconds

    def fast(self) -> None:
        for host in self.env.fleet.targets:
            self.env.fleet.runtime(host).latency.clear()

    def record_acts(self) -> None:
        """Note every command that changes a host, with the lease holder at that moment (observes only)."""
        for host in self.env.fleet.targets:
            runtime = self.env.fleet.runtime(host)
            inner = runtime.execute

            def observed(
                argv: list[str],
                stdin: str | None = None,
                *,
                _host: str = host,
                _inner: Callable[..., Any] = inner,
                _facts: Any = runtime.facts,
            ) -> Any:
                if argv[:1] == ["docker"] and len(argv) > 1 and argv[1] in MUTATING:
                    now = time.time()
                    live = [lease["owner"] for lease in _facts.leases.values() if float(lease.get("expires", 0)) > now]
                    target = _container_name(argv)
                    self.acts.append(Act(_host, argv[1], target, live[0] if len(live) == 1 else None))
                return _inner(argv, stdin)

            runtime.execute = observed  # type: ignore[method-assign]

    def lease_commands(self, host: str) -> list[list[str]]:
        return [argv for argv in self.env.fleet.commands_seen(host) if command_marker(argv) == LEASE_MARKER]

    # -- the real CLI ----------------------------------------------------------------

    async def lanes_status(self, daemon: DaemonProc, repo: Path | None = None) -> dict[str, dict[str, Any]]:
        """`lanes status --json` against a daemon's sqlite file, by lane."""
        code, out, err = await run_lanes(
            "status", "--json", "--db", str(daemon.db), "--repo", str(repo or self.repo.path)
        )
        assert code == 0, err
        return {row["name"]: row for row in json.loads(out)["lanes"]}

    async def daemon_status(self, daemon: DaemonProc) -> tuple[int, dict[str, Any], str]:
        """`lanes status --daemon URL`, as --json and as the table: exit code, the JSON, the text."""
        url = f"http://127.0.0.1:{daemon.port}"
        code, out, err = await run_lanes("status", "--daemon", url, "--json")
        assert not err.strip(), err
        table_code, table, err = await run_lanes("status", "--daemon", url, env={**os.environ, "COLUMNS": "400"})
        assert not err.strip() and table_code == code, (table_code, err)
        return code, json.loads(out), table


def reopen(repo: StateRepo, path: Path) -> None:
    """Point a StateRepo at its repository after the directory moved (a remote renamed away and back)."""
    repo.path = path
    repo.repo = pygit2.Repository(str(path))


def _container_name(argv: list[str]) -> str:
    if argv[1] == "run":
        for i, word in enumerate(argv):
            if word == "--name" and i + 1 < len(argv):
                return argv[i + 1]
            if word.startswith("--name="):
                return word.split("=", 1)[1]
        return "?"
    return argv[-1]


@contextlib.asynccontextmanager
async def control_world(tmp: Path, salt: int, *, bare: bool = False) -> AsyncIterator[ControlWorld]:
    """The example fleet on simulated Sparks and a state repo at its first commit; no daemon yet."""
    env = await sim_for_example(tmp, salt)
    world = ControlWorld(tmp, env, StateRepo(tmp / ("origin.git" if bare else "state-repo"), bare=bare))
    try:
        world.commit("initial fleet")
        yield world
    finally:
        for d in world.daemons:
            await d.kill()
        world.fast()
        await stop_demo(env)
    leaked = [pid for h in env.fleet.names for pid in env.fleet.runtime(h).alive_pids()]
    assert not leaked, f"stand-in processes left running: {leaked}"


# -- a disk that fills up ---------------------------------------------------------------


@contextlib.contextmanager
def small_disk(path: Path, size: str = "16m") -> Iterator[Path]:
    """A tmpfs of its own at `path` (a real file system that really fills up); unmounted at the end."""
    path.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "lanes-faults", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"mounting a tmpfs needs root (CI runs as root): {result.stderr.strip() or result.returncode}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def fill(disk: Path) -> Path:
    """Take every free byte of the file system at `disk`; returns the filler file (unlink it to free it)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for chunk in (1 << 20, 4096, 1):
            block = b"\0" * chunk
            while True:
                try:
                    os.write(fd, block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return filler


def checkpoint_wal(db: Path) -> None:
    """Fold the WAL into the database and truncate it, so the daemon's next write needs new blocks.

    Without it a write may land in WAL space the file system already gave out, and a full disk would
    show only some writes later: real, but not a test that fails at a known point.
    """
    with contextlib.closing(sqlite3.connect(db, timeout=10)) as conn:
        for _ in range(200):
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy == 0:
                return
            time.sleep(0.05)
    raise AssertionError(f"could not checkpoint {db}: the daemon kept it busy")


__all__ = [
    "EUGR",
    "EUGR_HOSTS",
    "PRODUCTION",
    "PROD_HOSTS",
    "Act",
    "Box",
    "ControlWorld",
    "DaemonProc",
    "checkpoint_wal",
    "control_world",
    "fill",
    "reopen",
    "small_disk",
    "wait_for",
]
