"""The shared state of one evaluation: indexes built once, and one way to report.

Rules must stay linear in the size of the fleet (a thousand lanes on a
thousand hosts are checked in well under a second), so the lookups they
need (running lanes per host, host profiles) are built here once. Reporting
goes through `Context.report`, the one place that applies the two severity
policies every rule shares: a rule's configured severity caps its findings,
and a stopped lane's denials become warnings that say what would happen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from reconciler.policy.ancestry import FixAncestry
from reconciler.policy.budget import LaneBudget
from reconciler.policy.config import RuleSettings, Settings
from reconciler.policy.diskfacts import ModelDisks
from reconciler.policy.hardware import Capacity
from reconciler.policy.hostmem import BootFree, HostMemory, boot_free
from reconciler.policy.verdict import DetailValue, Severity, Violation
from reconciler.spec.fleet import Host
from reconciler.spec.lane import Lane
from reconciler.spec.load import DesiredState
from reconciler.spec.policyfiles import KnownIssuesFile


@dataclass
class Context:
    desired: DesiredState
    settings: Settings
    capacities: Mapping[str, Capacity]
    known_issues: KnownIssuesFile
    fix_ancestry: FixAncestry = field(default_factory=dict)
    """Answers to the known-issues rule's ancestry questions, from whoever keeps git mirrors (may be none)."""
    host_memory: Mapping[str, HostMemory] = field(default_factory=dict)
    """MemAvailable per host from a probe, when the caller has one (the daemon's cycle); else profiles only."""
    model_disks: ModelDisks = field(default_factory=dict)
    """Free disk under each (host, model path) and the model's bytes there, from a probe; else none."""
    running_by_host: dict[str, list[Lane]] = field(default_factory=dict)
    plans: Mapping[str, LaneBudget] = field(default_factory=dict)
    """Each lane's per-rank figures (budget.py), once computed: the memory rules read them."""
    violations: list[Violation] = field(default_factory=list)

    @classmethod
    def build(
        cls,
        desired: DesiredState,
        settings: Settings,
        capacities: Mapping[str, Capacity],
        issues: KnownIssuesFile,
        fix_ancestry: FixAncestry | None = None,
        host_memory: Mapping[str, HostMemory] | None = None,
        model_disks: ModelDisks | None = None,
    ) -> Context:
        ctx = cls(
            desired=desired,
            settings=settings,
            capacities=capacities,
            known_issues=issues,
            fix_ancestry=fix_ancestry or {},
            host_memory=host_memory or {},
            model_disks=model_disks or {},
        )
        for lane in desired.lanes.values():
            if lane.running:
                for host in lane.hosts:
                    ctx.running_by_host.setdefault(host, []).append(lane)
        return ctx

    def host(self, name: str) -> Host | None:
        return self.desired.hosts.get(name)

    def capacity(self, host_name: str) -> Capacity | None:
        host = self.desired.hosts.get(host_name)
        if host is None:
            return None
        return self.capacities.get(host.hardware)

    def boot_free(self, host_name: str) -> BootFree | None:
        """Free memory a boot on this host would see: observed when a probe saw the host idle, else its profile."""
        capacity = self.capacity(host_name)
        if capacity is None:
            return None
        return boot_free(host_name, capacity, self.host_memory)

    def report(
        self,
        rule: RuleSettings,
        *,
        severity: Severity,
        lane: Lane | None,
        message: str,
        host: str | None = None,
        rank: int | None = None,
        detail: Mapping[str, DetailValue] | None = None,
        stopped_softens: bool = True,
    ) -> None:
        """Record a finding; `severity` is what the finding is worth before the caps."""
        effective: Severity = "deny" if severity == "deny" and rule.severity == "deny" else "warn"
        numbers: dict[str, DetailValue] = dict(detail or {})
        if lane is not None and not lane.running and stopped_softens:
            numbers["stopped"] = True
            if effective == "deny":
                numbers["would_deny"] = True
                message = f"lane is stopped, would be denied when started: {message}"
                effective = "warn"
            else:
                message = f"lane is stopped: {message}"
        self.violations.append(
            Violation(
                rule=rule.name,
                severity=effective,
                lane=lane.name if lane is not None else None,
                host=host,
                rank=rank,
                message=message,
                detail=numbers,
            )
        )
