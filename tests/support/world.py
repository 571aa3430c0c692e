"""The world of an end-to-end test: the example fleet on simulated Sparks, a state repo, and what converges
the one onto the other.

Two ways to drive a `World`, with the same views of the end state:

- daemons: real `lanes daemon` processes (`add_daemon`, each with its own config, owner, sqlite file,
  HTTP port and log) watching the state repo; a test commits, stages a fault and waits for what a
  daemon writes to its sqlite file;
- `cycle()`: the real `CycleRunner` cycle in this process, one cycle per call, toward the last commit
  made (or a state given to it), for cases where the daemon's scheduling adds nothing but time.

Either way a test asserts what runs where (`containers`, `lane_runs`), the journal, lane, apply and
commit rows of the store (`StoreView`, read-only connections, never a writer next to the daemon's), and
what `lanes status --json` prints (the real CLI, run as a process).

Each world is an async context manager that stops everything it started: daemons killed, faults healed,
the simulated Sparks stopped, and no engine stand-in left running.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from reconciler.execute.cycle import CycleResult, CycleRunner
from reconciler.facts.commands import LEASE_MARKER, command_marker
from reconciler.sim import SimFleet
from reconciler.sim.faults import HostFaults
from reconciler.source.loadcommit import LoadedCommit, load_commit
from reconciler.spec.load import DesiredState
from reconciler.store.journal import Store
from reconciler.transport.ssh import SSHTransport
from tests.support.example import (
    EUGR,
    EUGR_HOSTS,
    PROD_HOSTS,
    PROD_REPO,
    PRODUCTION,
    example_state,
    fast,
    fast_files,
    loaded,
)
from tests.support.gitrepo import StateRepo
from tests.support.lanesproc import DaemonProc, run_lanes, write_config
from tests.support.net import free_port
from tests.support.sparks import DemoEnv, loopback, running_sparks
from tests.support.storeview import StoreView

CONNECT_TIMEOUT_S = 2.0  # a host behind a cut link costs this per attempt, not the default 10 s
MUTATING = frozenset({"run", "stop", "rm", "pull"})


class Box(NamedTuple):
    """One container on a simulated host, as a test compares it before and after a fault."""

    name: str
    status: str
    commit: str
    image: str
    id: str


class Act(NamedTuple):
    """A command that changed a simulated host, and who held that host's lease when it ran."""

    host: str
    verb: str
    name: str
    holder: str | None


@dataclass
class World(StoreView):
    tmp: Path
    env: DemoEnv
    repo: StateRepo
    target: LoadedCommit
    """What `cycle()` converges toward: the last commit made, or the last state given to `cycle()`."""
    runner: CycleRunner
    faults: HostFaults
    daemons: list[DaemonProc] = field(default_factory=list)
    heads: list[str] = field(default_factory=list)
    acts: list[Act] = field(default_factory=list)

    @property
    def fleet(self) -> SimFleet:
        return self.env.fleet

    @property
    def store(self) -> Store:
        """The store of the reconciler in this process (`cycle()` writes it)."""
        return self.env.store

    @property
    def state(self) -> DesiredState:
        return self.target.desired

    @property
    def daemon(self) -> DaemonProc:
        """The world's one daemon."""
        assert len(self.daemons) == 1, [d.name for d in self.daemons]
        return self.daemons[0]

    @property
    def db(self) -> Path:  # type: ignore[override]  # StoreView's file; which one is decided here
        """The store the world's views read: its one daemon's, else the in-process reconciler's."""
        return self.daemon.db if self.daemons else Path(self.env.store.path)

    # -- driving -------------------------------------------------------------------

    def commit(
        self, message: str, changes: dict[str, dict[str, Any]] | None = None, *, parents: list[str] | None = None
    ) -> str:
        """Commit the example state with `changes` per lane onto the branch (`parents`: a force-push)."""
        head = self.repo.commit(fast_files(**(changes or {})), message, parents=parents)
        self.heads.append(head)
        self.target = load_commit(self.repo.repo, head)
        return head

    async def cycle(self, desired: DesiredState | None = None, *, apply: bool = True) -> CycleResult:
        """One reconcile cycle in this process toward `desired` (then the target), else toward the target."""
        if desired is not None:
            self.target = loaded(desired)
        return await self.runner.run_cycle(self.target, apply=apply)

    def image(self, tag: str, load_s: float = 0.5) -> str:
        """A new production engine image in the simulated registry (its stand-in loads in `load_s`)."""
        return self.fleet.registry.add(f"{PROD_REPO}:{tag}", env={"STANDIN_LOAD_S": str(load_s)}).pinned

    def add_daemon(
        self,
        name: str,
        *,
        url: str | None = None,
        db: Path | None = None,
        fetch_s: float = 30,
        resync_s: float = 300,
        extra: str = "",
        owner: str | None = None,
        log_level: str = "info",
        connect_timeout_s: float | None = None,
        health_s: float | None = None,
    ) -> DaemonProc:
        """A daemon with a folder, config and HTTP port of its own (owner `lanes-<name>`), not started yet."""
        where = self.tmp / name
        where.mkdir(parents=True, exist_ok=True)
        port = free_port()
        owner = owner or f"lanes-{name}"
        config = write_config(
            where, self.repo.path, self.env, http_port=port, extra=extra, resync_s=resync_s, fetch_s=fetch_s,
            owner=owner, log_level=log_level, url=url, db=db, connect_timeout_s=connect_timeout_s, health_s=health_s,
        )  # fmt: skip
        d = DaemonProc(name, where, config, port, owner, db or where / "daemon.db")
        self.daemons.append(d)
        return d

    # -- the hosts ------------------------------------------------------------------

    def containers(self, host: str) -> list[Box]:
        """Every container on a simulated host, running or not, by name."""
        return sorted(
            Box(name, c.status, c.labels.get("lanes.commit", ""), c.image_ref, c.id)
            for name, c in self.fleet.runtime(host).containers.items()
        )

    def labels(self, host: str) -> dict[str, dict[str, str]]:
        """name -> labels of the containers running on a simulated host."""
        return {
            name: dict(c.labels) for name, c in self.fleet.runtime(host).containers.items() if c.status == "running"
        }

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
        host = PROD_HOSTS[0] if lane == PRODUCTION else EUGR_HOSTS[0]
        return self.fleet.runtime(host).containers[f"lanes-{lane}-r0"].image_ref

    async def docker(self, host: str, *argv: str) -> str:
        """A docker command on a simulated host, as a person at its console runs it."""
        status, out, err = await self.fleet.runtime(host).execute(["docker", *argv])
        assert status == 0, err
        return out

    def slow(self, hosts: Sequence[str], command: str, seconds: float) -> None:
        """`command` (e.g. "docker run") takes `seconds` more on each of `hosts`."""
        for host in hosts:
            self.fleet.runtime(host).latency[command] = seconds

    def fast(self) -> None:
        """Every command at its own speed again."""
        for host in self.fleet.targets:
            self.fleet.runtime(host).latency.clear()

    def record_acts(self) -> None:
        """Note every command that changes a host, with the lease holder at that moment (observes only)."""
        for host in self.fleet.targets:
            runtime = self.fleet.runtime(host)
            inner = runtime.execute

            def observed(
                argv: list[str],
                stdin: str | None = None,
                *,
                _host: str = host,
                _inner: Callable[..., Any] = inner,
                _facts: Any = runtime.facts,
            ) -> Any:
                # A `docker run --rm` is the one-off launcher check on a pulled image, not a rank.
                if argv[:1] == ["docker"] and len(argv) > 1 and argv[1] in MUTATING and "--rm" not in argv:
                    now = time.time()
                    live = [lease["owner"] for lease in _facts.leases.values() if float(lease.get("expires", 0)) > now]
                    target = _container_name(argv)
                    self.acts.append(Act(_host, argv[1], target, live[0] if len(live) == 1 else None))
                return _inner(argv, stdin)

            runtime.execute = observed  # type: ignore[method-assign]

    def lease_commands(self, host: str) -> list[list[str]]:
        return [argv for argv in self.fleet.commands_seen(host) if command_marker(argv) == LEASE_MARKER]

    # -- the real CLI ----------------------------------------------------------------

    async def lanes(self, *args: str) -> tuple[int, str, str]:
        """The real `lanes` command as a process (never blocking this loop: the simulated hosts run on it)."""
        return await run_lanes(*args)

    async def lanes_status(
        self, daemon: DaemonProc | None = None, repo: Path | None = None
    ) -> dict[str, dict[str, Any]]:
        """`lanes status --json` against a daemon's sqlite file (or the world's store), by lane."""
        db = daemon.db if daemon is not None else self.db
        code, out, err = await run_lanes("status", "--json", "--db", str(db), "--repo", str(repo or self.repo.path))
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


def _container_name(argv: list[str]) -> str:
    if argv[1] == "run":
        for i, word in enumerate(argv):
            if word == "--name" and i + 1 < len(argv):
                return argv[i + 1]
            if word.startswith("--name="):
                return word.split("=", 1)[1]
        return "?"
    return argv[-1]


# -- the worlds -----------------------------------------------------------------------


@contextlib.asynccontextmanager
async def world_over(
    commit: LoadedCommit,
    tmp: Path,
    workdir: Path,
    base_address: str,
    *,
    bare: bool = False,
    connect_timeout_s: float | None = None,
) -> AsyncIterator[World]:
    """Simulated Sparks for `commit` in `workdir`, an empty state repo, and a cycle runner; nothing run yet.

    With `connect_timeout_s` the in-process runner gets a transport of its own with that timeout.
    """
    async with running_sparks(commit, workdir, base_address=base_address) as env:
        transport: SSHTransport | None = None
        runner = env.runner
        if connect_timeout_s is not None:
            transport = SSHTransport(
                env.fleet.known_hosts_path, [env.fleet.client_key_path], connect_timeout=connect_timeout_s
            )
            runner = CycleRunner(transport, env.store, runner.secrets, runner.settings)
        repo = StateRepo(tmp / ("origin.git" if bare else "state-repo"), bare=bare)
        world = World(tmp, env, repo, commit, runner, HostFaults(env.fleet))
        try:
            yield world
        finally:
            for d in world.daemons:
                await d.kill()
            if transport is not None:
                await transport.close()
            await world.faults.heal()
            world.fast()


@contextlib.asynccontextmanager
async def sim_world(tmp: Path, base_address: str) -> AsyncIterator[World]:
    """The example state (fast readiness timeouts) and the reconciler in this process; no commit, no cycle."""
    async with world_over(loaded(fast(example_state())), tmp, tmp, base_address) as world:
        yield world


@contextlib.asynccontextmanager
async def control_world(tmp: Path, salt: int, *, bare: bool = False) -> AsyncIterator[World]:
    """The example fleet on simulated Sparks and a state repo at its first commit; no daemon yet."""
    async with world_over(loaded(fast(example_state())), tmp, tmp / "simwork", loopback(salt), bare=bare) as world:
        world.commit("initial fleet")
        yield world


@contextlib.asynccontextmanager
async def daemon_world(
    tmp: Path,
    salt: int,
    *,
    resync_s: float = 300,
    connect_timeout_s: float | None = CONNECT_TIMEOUT_S,
    log_level: str = "warning",
    health_s: float | None = None,
) -> AsyncIterator[World]:
    """One daemon process over the example fleet, converged at the first commit (`health_s`: its health
    cadence, `[daemon] health_interval_s`).

    The resync is left at its default unless a test asks: a test that checks the state a fault left
    behind must not race a resync that already retries; it converges afterwards with `daemon.kick()`.
    """
    async with control_world(tmp, salt) as world:
        d = world.add_daemon(
            "daemon",
            owner="lanes-test",
            log_level=log_level,
            resync_s=resync_s,
            connect_timeout_s=connect_timeout_s,
            health_s=health_s,
        )
        await d.start()
        await world.deployed(world.heads[0])
        yield world


@contextlib.asynccontextmanager
async def cycle_world(tmp: Path, salt: int) -> AsyncIterator[World]:
    """The real CycleRunner cycle in this process over the example fleet, converged at the first commit."""
    commit = loaded(fast(example_state()))
    async with world_over(commit, tmp, tmp / "simwork", loopback(salt), connect_timeout_s=CONNECT_TIMEOUT_S) as world:
        head = world.commit("initial fleet")
        result = await world.cycle()
        assert {r.lane: r.result for r in result.results if r.lane in (PRODUCTION, EUGR)} == {
            PRODUCTION: "applied",
            EUGR: "applied",
        }, [r.error for r in result.results]
        await world.deployed(head, timeout=1)
        yield world
