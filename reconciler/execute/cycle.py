"""One reconcile cycle: commit -> policy verdict -> probe -> plan -> apply.

The CLI (`lanes plan/apply/demo`) and the daemon both run exactly this, so
what a person sees with `lanes plan` is what the daemon would do.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from reconciler.execute.apply import Executor, ExecutorConfig, LaneResult, ProgressFn
from reconciler.execute.hostops import HostOps
from reconciler.execute.record import serving_specs
from reconciler.execute.results import SETTLED
from reconciler.execute.secrets import SecretStore
from reconciler.execute.swap import stopped_lanes, swap_failures
from reconciler.facts.observed import ObservedFleet
from reconciler.observe.probe import lease_file, observe
from reconciler.plan import Plan, PlanOptions, plan_fleet
from reconciler.plan.windows import overrides_windows
from reconciler.policy import Verdict, evaluate
from reconciler.policy.ancestry import FixAncestry
from reconciler.policy.diskfacts import disks_from_observation
from reconciler.policy.hostmem import from_observation
from reconciler.source.loadcommit import LoadedCommit
from reconciler.spec.load import DesiredState
from reconciler.spec.policyfiles import KnownIssuesFile
from reconciler.store.journal import Store
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


@dataclass
class CycleResult:
    commit: str
    verdict: Verdict
    observed: ObservedFleet
    plan: Plan
    results: list[LaneResult] = field(default_factory=list)

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
        self.settings = settings
        self.ancestry = ancestry
        """Answers known issues' fix-commit questions from the git-head mirrors (`upstream.ancestry`)."""

    async def observe_and_plan(
        self,
        loaded: LoadedCommit,
        only_lanes: frozenset[str] | None = None,
        *,
        wait_backoff: bool = True,
        now: bool = False,
    ) -> tuple[Verdict, ObservedFleet, Plan, dict[str, HostTarget]]:
        """`now`: a person's override (`lanes apply --now`): no change waits for a change window."""
        desired = loaded.desired
        answers = self.ancestry(desired, loaded.policies.known_issues) if self.ancestry else None
        targets = targets_for(desired, self.settings.overrides)
        observed = await observe(
            desired,
            self.transport,
            targets,
            timeout=self.settings.probe_timeout_s,
            concurrency=self.settings.concurrency,
        )
        # Evaluated after the probe: free memory at boot comes from each idle host's MemAvailable when seen,
        # free disk under each model path from the same probe (the model-disk rule).
        verdict = evaluate(
            desired,
            loaded.policies,
            fix_ancestry=answers,
            host_memory=from_observation(observed),
            model_disks=disks_from_observation(observed),
        )
        records = self.store.lanes()
        options = PlanOptions(
            owner=self.settings.owner,
            drop_caches=self.settings.drop_caches,
            failed=self.store.failed_fingerprints(),
            ready=self.store.ready_fingerprints(),
            # A person running `lanes plan`/`apply` asks for now: the backoff paces the daemon's own retries.
            retry_at=self.store.retry_schedule() if wait_backoff else {},
            clock=time.time(),
            only_lanes=only_lanes,
            windows=loaded.policies.windows,
            window_clock=window_clock(),
            window_override=now or overrides_windows(loaded.message),
            stopped=stopped_lanes(records),
            swapped=swap_failures(records, pending_restores(self.store)),
            serving=serving_specs(records),
        )
        return verdict, observed, plan_fleet(desired, observed, verdict, options), targets

    async def run_cycle(
        self,
        loaded: LoadedCommit,
        *,
        apply: bool = True,
        only_lanes: frozenset[str] | None = None,
        progress: ProgressFn | None = None,
        wait_backoff: bool = True,
        now: bool = False,
    ) -> CycleResult:
        verdict, observed, fleet_plan, targets = await self.observe_and_plan(
            loaded, only_lanes, wait_backoff=wait_backoff, now=now
        )
        result = CycleResult(loaded.commit, verdict, observed, fleet_plan)
        if not apply:
            return result
        # Origins (a NAS holding checkpoints) are reached only to stage models from: never probed.
        reach = {**origin_targets(loaded.desired, self.settings.overrides), **targets}
        ops = HostOps(
            self.transport, reach, timeout=self.settings.command_timeout_s, pull_timeout=self.settings.pull_timeout_s
        )
        executor = Executor(
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
            ),
            progress,
        )
        result.results = await executor.apply(fleet_plan, loaded.desired, lease_file(loaded.desired))
        return result
