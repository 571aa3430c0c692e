"""One reconcile cycle: commit -> policy verdict -> probe -> plan -> apply.

The CLI (`lanes plan/apply/demo`) and the daemon both run exactly this, so
what a person sees with `lanes plan` is what the daemon would do.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from reconciler.execute.apply import Executor, ExecutorConfig, LaneResult, ProgressFn
from reconciler.execute.health import HealthWatch
from reconciler.execute.hostops import HostOps
from reconciler.execute.localorigin import LocalOrigins
from reconciler.execute.operations import DoneFn, Operations
from reconciler.execute.preflight import judge, preflight, unjudged
from reconciler.execute.results import SETTLED
from reconciler.execute.secrets import SecretStore
from reconciler.facts.observed import ObservedFleet
from reconciler.observe.probe import ProbeMemory, lease_file, observe
from reconciler.plan import Plan, PlanOptions, plan_fleet
from reconciler.plan.operations import preemptions, split_plan
from reconciler.plan.windows import overrides_windows
from reconciler.policy import Verdict, evaluate
from reconciler.policy.ancestry import FixAncestry
from reconciler.policy.diskfacts import disks_from_observation
from reconciler.policy.hostmem import from_observation
from reconciler.policy.reuse import Reuse
from reconciler.source.loadcommit import LoadedCommit
from reconciler.spec.load import DesiredState
from reconciler.spec.policyfiles import KnownIssuesFile
from reconciler.store.journal import Store
from reconciler.store.lanestate import lane_states, last_starts
from reconciler.store.swaprestore import pending_restores
from reconciler.transport.base import HostTarget, Transport


@dataclass(frozen=True)
class HostOverride:
    """Where to reach a host instead of its state address (simulated Sparks, tunnels)."""

    address: str
    port: int
    user: str | None = None


AncestryFn = Callable[[DesiredState, KnownIssuesFile], FixAncestry]

CLOCK_FILE_ENV = "LANES_TEST_CLOCK_FILE"
"""Tests only: a file holding the epoch second change windows are judged at, read at every cycle, so a
test moves a daemon process's window clock by writing the file. Unset, windows follow the system clock."""


def window_clock() -> float:
    """The instant change windows are judged at: the system clock, unless a test set `CLOCK_FILE_ENV`."""
    path = os.environ.get(CLOCK_FILE_ENV)
    if path:
        return float(Path(path).read_text(encoding="utf-8").strip())
    return time.time()


@dataclass(frozen=True)
class CycleSettings:
    owner: str = "lanes"
    probe_timeout_s: float = 30.0
    command_timeout_s: float = 60.0
    pull_timeout_s: float = 1800.0
    concurrency: int = 128
    drop_caches: bool = False
    overrides: Mapping[str, HostOverride] = field(default_factory=dict)
    watch_interval_s: float = 5.0
    gpu_free_timeout_s: float = 60.0
    ssh_key: Path | None = None
    known_hosts: Path | None = None
    """The reconciler's key and pinned host keys, for staging models (rsync over ssh); the transport has its own."""
    stage_parallel: int = 4
    origins: LocalOrigins = field(default_factory=LocalOrigins)
    """The daemon's (or `lanes apply`'s) allowlist of control-node origin folders (execute.localorigin)."""
    preflight: bool = True
    """Parse each lane's arguments with its image's own parser before applying it (execute/preflight.py)."""
    reaction_max_age_s: float = 330.0
    """A commit's reaction probes the hosts of the lanes it changes and plans with the other hosts' last
    observation when it is at most this old (the daemon: a resync interval and a probe's timeout)."""
    health_interval_s: float | None = None
    """The daemon's health cadence (`reconciler.execute.health`): its cycles use in-sync lanes' kept answers
    and its health round asks them again; None (`lanes plan`, `lanes apply`): every cycle asks every engine."""


@dataclass
class CycleResult:
    commit: str
    verdict: Verdict
    observed: ObservedFleet
    plan: Plan
    results: list[LaneResult] = field(default_factory=list)
    started: tuple[str, ...] = ()
    """Lanes whose change this cycle started as operations of their own (the daemon's cycles only)."""
    in_flight: tuple[str, ...] = ()
    """Lanes left out because an earlier operation of theirs (or of a lane bound to them) still runs."""
    preempted: tuple[str, ...] = ()
    """Lanes in flight whose transaction this cycle ends, since the commit wants another spec of them."""
    deferred: tuple[str, ...] = ()
    """Lanes this cycle would change but left for later, since a lane they move with is in flight."""
    judging: tuple[str, ...] = ()
    """Lanes this cycle would change but whose arguments their image is still judging (the preflight)."""

    @property
    def ok(self) -> bool:
        return all(r.result in SETTLED for r in self.results)


def targets_for(desired: DesiredState, overrides: Mapping[str, HostOverride]) -> dict[str, HostTarget]:
    out = {}
    for name, host in desired.hosts.items():
        o = overrides.get(name)
        out[name] = HostTarget(
            name=name,
            address=o.address if o else host.address,
            port=o.port if o else host.ssh_port(desired.fleet),
            user=(o.user if o and o.user else host.ssh_user(desired.fleet)),
        )
    return out


def origin_targets(desired: DesiredState, overrides: Mapping[str, HostOverride]) -> dict[str, HostTarget]:
    """Where the fleet's origins (`origins:` in the fleet file) answer SSH, overrides applied."""
    out = {}
    for origin in desired.fleet.origins:
        o = overrides.get(origin.name)
        out[origin.name] = HostTarget(
            name=origin.name,
            address=o.address if o else origin.address,
            port=o.port if o else origin.ssh_port(desired.fleet),
            user=(o.user if o and o.user else origin.ssh_user(desired.fleet)),
        )
    return out


class CycleRunner:
    def __init__(
        self,
        transport: Transport,
        store: Store,
        secrets: SecretStore,
        settings: CycleSettings,
        ancestry: AncestryFn | None = None,
    ) -> None:
        self.transport = transport
        self.store = store
        self.secrets = secrets
        self.health = HealthWatch()
        """In-sync lanes' engines and their last answers, kept between cycles at the daemon's health cadence."""
        self.settings = settings
        self.ancestry = ancestry
        """Answers known issues' fix-commit questions from the git-head mirrors (`upstream.ancestry`)."""
        self.probes = ProbeMemory()
        """Each host's last facts and their digest: an unchanged host answers with the digest alone."""
        self.reuse = Reuse()
        """Each lane's rendered ranks and budget, computed again when the commit or the facts they read change."""
        self._reach: tuple[object, object, dict[str, HostTarget], dict[str, HostTarget]] | None = None

    @property
    def settings(self) -> CycleSettings:
        return self._settings

    @settings.setter
    def settings(self, settings: CycleSettings) -> None:
        """A reloaded config's health cadence applies from the next round and cycle on."""
        self._settings = settings
        self.health.interval_s = settings.health_interval_s

    def reach(self, desired: DesiredState) -> tuple[dict[str, HostTarget], dict[str, HostTarget]]:
        """The fleet's hosts as SSH targets, and those with the origins (where a lane's commands may go).

        Built once per loaded commit and settings, and shared (read only) by the cycle and every operation:
        each operation's executor built its own before, 1,000 targets held while it ran, 25 MB at a
        1,000-host convergence (bench/README.md, issue 27)."""
        overrides = self.settings.overrides
        kept = self._reach
        if kept is None or kept[0] is not desired or kept[1] is not overrides:
            hosts = targets_for(desired, overrides)
            kept = self._reach = (desired, overrides, hosts, {**origin_targets(desired, overrides), **hosts})
        return kept[2], kept[3]

    async def observe_and_plan(
        self,
        loaded: LoadedCommit,
        only_lanes: frozenset[str] | None = None,
        *,
        wait_backoff: bool = True,
        now: bool = False,
        run_preflight: bool = False,
        first: frozenset[str] | None = None,
    ) -> tuple[Verdict, ObservedFleet, Plan, dict[str, HostTarget]]:
        """`now`: a person's override (`lanes apply --now`): no change waits for a change window. `first`: a
        commit's reaction (`plan.reaction`): only these hosts are probed, the others' recent facts reused."""
        desired = loaded.desired
        answers = self.ancestry(desired, loaded.policies.known_issues) if self.ancestry else None
        targets, _ = self.reach(desired)
        observed = await observe(
            desired,
            self.transport,
            targets,
            timeout=self.settings.probe_timeout_s,
            concurrency=self.settings.concurrency,
            memory=self.probes,
            first=first,
            max_age_s=self.settings.reaction_max_age_s,
        )
        # Evaluated after the probe: free memory at boot comes from each idle host's MemAvailable when seen,
        # free disk under each model path from the same probe (the model-disk rule).
        verdict = evaluate(
            desired,
            loaded.policies,
            fix_ancestry=answers,
            host_memory=from_observation(observed),
            host_info=observed.host_info(),
            model_disks=disks_from_observation(observed),
            reuse=self.reuse,
        )
        undoing = {t for info in pending_restores(self.store).values() for t in info.get("taking") or ()}
        options = PlanOptions(
            owner=self.settings.owner,
            drop_caches=self.settings.drop_caches,
            lanes=lane_states(self.store),
            # A person running `lanes plan`/`apply` asks for now: the backoff paces the daemon's own retries.
            wait_backoff=wait_backoff,
            undoing=frozenset(str(t) for t in undoing),
            clock=time.time(),
            only_lanes=only_lanes,
            windows=loaded.policies.windows,
            window_clock=window_clock(),
            window_override=now or overrides_windows(loaded.message),
            away=last_starts(self.store),
        )
        fleet_plan = plan_fleet(desired, observed, verdict, options)
        # Each lane to deploy has its arguments parsed by its own image first; a refusal denies it (preflight.py).
        ops = HostOps(self.transport, targets, pull_timeout=self.settings.pull_timeout_s) if run_preflight else None
        judged = await preflight(ops, self.store, desired, verdict, fleet_plan)
        if judged is not verdict:
            verdict, fleet_plan = judged, plan_fleet(desired, observed, judged, options)
        return verdict, observed, fleet_plan, targets

    async def run_cycle(
        self,
        loaded: LoadedCommit,
        *,
        apply: bool = True,
        only_lanes: frozenset[str] | None = None,
        progress: ProgressFn | None = None,
        wait_backoff: bool = True,
        now: bool = False,
        operations: Operations | None = None,
    ) -> CycleResult:
        """`operations`: the daemon's, for a trial beside them (their host locks; its gate ended by a commit)."""
        verdict, observed, fleet_plan, _ = await self.observe_and_plan(
            loaded, only_lanes, wait_backoff=wait_backoff, now=now, run_preflight=apply and self.settings.preflight
        )
        result = CycleResult(loaded.commit, verdict, observed, fleet_plan)
        if not apply:
            return result
        executor = self._executor(loaded, progress, operations)
        result.results = await executor.apply(fleet_plan, loaded.desired, lease_file(loaded.desired))
        return result

    async def start_cycle(
        self,
        loaded: LoadedCommit,
        operations: Operations,
        done: DoneFn,
        progress: ProgressFn | None = None,
        judged: Callable[[], None] = lambda: None,
        only_lanes: frozenset[str] | None = None,
        first: frozenset[str] | None = None,
    ) -> CycleResult:
        """The daemon's cycle: plan, observe what needs no transaction, start the rest as operations; never
        wait for one. A lane in flight is left to its operation unless this commit wants another spec of it.
        The preflight runs in the background too (`judged` is told when it ended): a lane whose image has
        not judged its arguments waits for that, with kept verdicts applied here as in `lanes apply`.
        `only_lanes`: plan and act for these lanes alone (`lanes reconcile --lane`, a commit's reaction);
        `first`: the hosts a reaction probes (the others' recent facts are reused)."""
        verdict, observed, fleet_plan, targets = await self.observe_and_plan(loaded, only_lanes, first=first)
        if self.settings.preflight:
            waiting = unjudged(self.store, loaded.desired, verdict, fleet_plan, targets)
            if waiting:
                ops = HostOps(self.transport, targets, pull_timeout=self.settings.pull_timeout_s)
                operations.judge({c.lane: c.key for c in waiting}, partial(judge, ops, self.store, waiting), judged)
        result = CycleResult(loaded.commit, verdict, observed, fleet_plan)
        wanted = preemptions(fleet_plan, operations.targets())
        result.preempted = tuple(lane for lane in wanted if operations.preempt(lane, loaded.commit))
        # A lane whose transaction cannot be ended now (it is rolling back) is planned again once it ends.
        unended = tuple(lane for lane in wanted if lane not in result.preempted)
        # A trial on a host this plan acts on is ended (the newest commit wins); until it let go, lanes there wait.
        held = operations.trials.claim(fleet_plan, loaded.commit, full=only_lanes is None)
        split = split_plan(fleet_plan, operations.busy(), restoring=pending_restores(self.store).keys(), held=held)
        result.in_flight = tuple(sorted({*operations.busy(), *split.deferred} & {lp.lane for lp in fleet_plan.lanes}))
        result.deferred = tuple(sorted({*split.deferred, *unended}))
        result.judging = tuple(sorted(operations.judging() & {lp.lane for lp in fleet_plan.lanes}))
        lease = lease_file(loaded.desired)

        async def run(plan: Plan) -> list[LaneResult]:
            return await self._executor(loaded, progress, operations).apply(plan, loaded.desired, lease)

        # Changes start first, in the background: they never wait for the lanes observed after them (a held
        # lane's engine asked; an in-sync lane's kept answer, or its engine's when none is fresh).
        for plan in split.operations:
            operations.start(loaded.commit, plan, run, done)
        result.started = tuple(lp.lane for plan in split.operations for lp in plan.lanes)
        planned = {lp.lane for lp in fleet_plan.lanes}
        in_sync = {lp.lane for lp in split.observe.lanes if lp.action == "noop"}
        gone = set(self.health.watched) - planned if only_lanes is None else set()
        self.health.forget((planned - in_sync) | gone)  # changed, held or in flight: asked afresh once in sync
        result.results = await self._executor(loaded, progress, operations).apply(split.observe, loaded.desired, lease)
        return result

    def _executor(
        self, loaded: LoadedCommit, progress: ProgressFn | None, operations: Operations | None = None
    ) -> Executor:
        # Origins (a NAS holding checkpoints) are reached only to stage models from: never probed.
        _, reach = self.reach(loaded.desired)
        ops = HostOps(
            self.transport, reach, timeout=self.settings.command_timeout_s, pull_timeout=self.settings.pull_timeout_s
        )
        return Executor(
            ops,
            self.store,
            self.secrets,
            ExecutorConfig(
                owner=self.settings.owner,
                lease_ttl_s=loaded.desired.fleet.lease_ttl_s,
                watch_interval_s=self.settings.watch_interval_s,
                gpu_free_timeout_s=self.settings.gpu_free_timeout_s,
                ssh_key=self.settings.ssh_key,
                known_hosts=self.settings.known_hosts,
                stage_parallel=self.settings.stage_parallel,
                origins=self.settings.origins,
            ),
            progress,
            operations.inflight if operations is not None else None,
            self.health,
        )
