"""Worlds for the host-fault matrix: the example fleet on simulated Sparks, a state repo, and a reconciler.

Two ways to drive it, with the same views of the end state:

- `daemon_world`: the real daemon process (`python -m reconciler.cli.main daemon --config`) watching
  the state repo; a test commits, stages a fault and waits for what the daemon writes to its sqlite file.
- `cycle_world`: the real `Reconciler` cycle in this process, one cycle per call, for cases where the
  daemon's scheduling adds nothing but time.

Either way a test asserts what runs where (`containers`), the journal, lane and apply rows of the store
(read-only connections, never a writer next to the daemon's), and what `lanes status --json` prints
(the real CLI, run as a process).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sqlite3
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from reconciler.cli.demo import DemoEnv, stop_demo
from reconciler.execute.cycle import CycleResult, Reconciler
from reconciler.sim.faults import HostFaults
from reconciler.source.loadcommit import load_commit
from reconciler.transport.ssh import SSHTransport
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

CONNECT_TIMEOUT_S = 2.0  # a host behind a cut link costs this per attempt, not the default 10 s
PROD_REPO = "aidendle94/sparkrun-sglang-dsv41-gb10"  # the example lanes' image repositories
EUGR_REPO = "eugr/spark-vllm-b12x"
CONVERGE_S = 90.0  # generous: two cores, other test runs next to this one


class Box(NamedTuple):
    """One container on a simulated host, as a test compares it before and after a fault."""

    name: str
    status: str
    commit: str
    image: str
    id: str


@dataclass
class FaultWorld:
    tmp: Path
    env: DemoEnv
    repo: StateRepo
    faults: HostFaults
    db: Path
    config: Path | None = None
    proc: asyncio.subprocess.Process | None = None
    reconciler: Reconciler | None = None
    transport: SSHTransport | None = None
    heads: list[str] = field(default_factory=list)

    # -- driving -----------------------------------------------------------------

    def commit(self, message: str, **lane_changes: dict[str, Any]) -> str:
        head = self.repo.commit(fast_files(**lane_changes), message)
        self.heads.append(head)
        return head

    async def start_daemon(self) -> None:
        assert self.config is not None
        self.proc = await spawn_daemon(self.config, self.tmp / "daemon.log")

    def kick(self) -> None:
        """SIGHUP: the daemon reloads its config and reconciles at once, as its resync would later."""
        assert self.proc is not None and self.proc.returncode is None
        self.proc.send_signal(signal.SIGHUP)

    async def stop_daemon(self) -> int:
        """SIGTERM and wait: the daemon must exit 0 with no transaction in flight."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.proc.wait(), 60)
        self.proc = None
        return code

    async def cycle(self) -> CycleResult:
        """One in-process reconcile cycle toward the repo's head."""
        assert self.reconciler is not None
        return await self.reconciler.run_cycle(load_commit(self.repo.repo, self.repo.head()))

    async def lanes(self, *args: str) -> tuple[int, str, str]:
        """The real `lanes` command as a process (never blocking this loop: the simulated hosts run on it)."""
        return await run_lanes(*args)

    async def status(self) -> dict[str, dict[str, Any]]:
        """`lanes status --json`, by lane."""
        code, out, err = await self.lanes("status", "--json", "--db", str(self.db), "--repo", str(self.repo.path))
        assert code == 0, err
        return {row["name"]: row for row in json.loads(out)["lanes"]}

    # -- what the store says -------------------------------------------------------

    def rows(self, sql: str, *args: object) -> list[dict[str, Any]]:
        if not self.db.exists():
            return []
        with contextlib.closing(sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=5)) as conn:
            conn.row_factory = sqlite3.Row
            try:
                return [dict(r) for r in conn.execute(sql, args)]
            except sqlite3.OperationalError:
                return []  # the daemon has not created its tables yet

    def journal(self, lane: str, commit: str) -> list[dict[str, Any]]:
        return self.rows("select * from journal where lane = ? and [commit] = ? order by id", lane, commit)

    def journal_has(self, lane: str, kind: str, commit: str) -> bool:
        return any(r["kind"] == kind for r in self.journal(lane, commit))

    def applies(self, lane: str, commit: str) -> list[dict[str, Any]]:
        return self.rows("select * from applies where lane = ? and [commit] = ? order by id", lane, commit)

    def lane_row(self, lane: str) -> dict[str, Any]:
        found = self.rows("select * from lanes where name = ?", lane)
        return found[0] if found else {}

    def unfinished_steps(self) -> list[dict[str, Any]]:
        return self.rows("select * from journal where state = 'started'")

    def commit_outcome(self, sha: str) -> dict[str, Any]:
        found = self.rows("select * from commits where sha = ?", sha)
        if not found:
            return {}
        return {**found[0], "detail": json.loads(found[0]["detail"] or "{}")}

    def health(self, lane: str) -> tuple[str | None, str | None]:
        return lane_health(self.db, lane)

    # -- what runs where -------------------------------------------------------------

    def containers(self, host: str) -> list[Box]:
        return sorted(
            Box(name, c.status, c.labels.get("lanes.commit", ""), c.image_ref, c.id)
            for name, c in self.env.fleet.runtime(host).containers.items()
        )

    def snapshot(self, hosts: Sequence[str]) -> dict[str, list[Box]]:
        return {h: self.containers(h) for h in hosts}

    def lane_runs(self, lane: str, hosts: Sequence[str], commit: str, image: str) -> bool:
        """Exactly the lane's ranks, one per host in order, running `image` from `commit`, and nothing else."""
        return all(
            [(b.name, b.status, b.commit, b.image) for b in self.containers(h)]
            == [(f"lanes-{lane}-r{rank}", "running", commit, image)]
            for rank, h in enumerate(hosts)
        )

    def image_of(self, lane: str) -> str:
        return (
            self.env.fleet.runtime(PROD_HOSTS[0] if lane == PRODUCTION else EUGR_HOSTS[0])
            .containers[f"lanes-{lane}-r0"]
            .image_ref
        )

    async def converged(
        self, head: str, lanes: Sequence[str] = (PRODUCTION, EUGR), timeout: float = CONVERGE_S
    ) -> None:
        """Each lane deployed at `head` and healthy: its record says so and its apply row is written (after it)."""
        await wait_for(
            lambda: all(
                self.health(lane) == ("healthy", head)
                and any(a["result"] == "applied" for a in self.applies(lane, head))
                for lane in lanes
            ),
            timeout,
            f"{', '.join(lanes)} applied and healthy at {head[:12]}",
            0.1,
        )


def _with_ssh_settings(config: Path) -> None:
    text = config.read_text()
    config.write_text(text.replace("[ssh]\n", f"[ssh]\nconnect_timeout_s = {CONNECT_TIMEOUT_S}\n", 1))


@contextlib.asynccontextmanager
async def daemon_world(tmp: Path, salt: int, *, resync_s: float = 300) -> AsyncIterator[FaultWorld]:
    """The daemon as a process over the example fleet, converged at the first commit.

    The resync is left at its default unless a test asks: a test that checks the state a fault left
    behind must not race a resync that already retries; it converges afterwards with `kick()`.
    """
    env = await sim_for_example(tmp, salt)
    world = FaultWorld(tmp, env, StateRepo(tmp / "state-repo"), HostFaults(env.fleet), tmp / "daemon.db")
    try:
        head = world.commit("initial fleet")
        world.config = write_config(tmp, world.repo.path, env, http_port=free_port(), resync_s=resync_s)
        _with_ssh_settings(world.config)
        await world.start_daemon()
        await world.converged(head)
        yield world
    finally:
        if world.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                world.proc.kill()
            await world.proc.wait()
        await world.faults.heal()
        await stop_demo(env)
    _no_leaks(env)


@contextlib.asynccontextmanager
async def cycle_world(tmp: Path, salt: int) -> AsyncIterator[FaultWorld]:
    """The real Reconciler cycle in this process over the example fleet, converged at the first commit."""
    env = await sim_for_example(tmp, salt)
    transport = SSHTransport(env.fleet.known_hosts_path, [env.fleet.client_key_path], connect_timeout=CONNECT_TIMEOUT_S)
    base = env.reconciler
    world = FaultWorld(
        tmp,
        env,
        StateRepo(tmp / "state-repo"),
        HostFaults(env.fleet),
        env.store.path,
        reconciler=Reconciler(transport, env.store, base.secrets, base.settings),
        transport=transport,
    )
    try:
        head = world.commit("initial fleet")
        result = await world.cycle()
        assert {r.lane: r.result for r in result.results if r.lane in (PRODUCTION, EUGR)} == {
            PRODUCTION: "applied",
            EUGR: "applied",
        }, [r.error for r in result.results]
        await world.converged(head, timeout=1)
        yield world
    finally:
        await transport.close()
        await world.faults.heal()
        await stop_demo(env)
    _no_leaks(env)


def _no_leaks(env: DemoEnv) -> None:
    leaked = [pid for h in env.fleet.names for pid in env.fleet.runtime(h).alive_pids()]
    assert not leaked, f"stand-in processes left running: {leaked}"


__all__ = [
    "EUGR",
    "EUGR_HOSTS",
    "EUGR_REPO",
    "PRODUCTION",
    "PROD_HOSTS",
    "PROD_REPO",
    "Box",
    "FaultWorld",
    "cycle_world",
    "daemon_world",
]
