"""`evaluate(desired, policies) -> Verdict`: every enabled rule over one commit.

The one entry point of the policy layer. It checks the policy files first
(an unusable rules.yaml is an InputError before any lane is looked at),
computes the per-rank budget of every lane, running or stopped, so a person
sees whether a stopped lane would fit, then runs the enabled rules in a
fixed order and returns the findings sorted, so the same commit always
gives the same verdict. Pure: no I/O, no clock, no globals.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

from reconciler.engines.ports import listening
from reconciler.facts.hostinfo import HostInfo
from reconciler.policy.ancestry import FixAncestry
from reconciler.policy.budget import BudgetParams, LaneBudget, budget_reads, lane_budget
from reconciler.policy.config import RULE_PARAMS, RuleSettings, Settings, parse_rules
from reconciler.policy.context import Context
from reconciler.policy.diskfacts import ModelDisks
from reconciler.policy.hardware import capacities
from reconciler.policy.hostmem import HostMemory
from reconciler.policy.reuse import Reuse
from reconciler.policy.rules.flags import RULE as FLAGS_RULE
from reconciler.policy.rules.flags import check_engine_flags
from reconciler.policy.rules.known_issues import check_known_issues
from reconciler.policy.rules.memory import check_boot_utilization, check_memory_budget
from reconciler.policy.rules.modeldisk import check_model_disk, check_model_weights
from reconciler.policy.rules.mounts import check_mounts
from reconciler.policy.rules.pins import check_image_digest, check_model_revision
from reconciler.policy.rules.render import RULE as RENDER_RULE
from reconciler.policy.rules.render import render_lanes
from reconciler.policy.rules.secrets import check_secrets
from reconciler.policy.rules.sharing import check_host_sharing, check_name_clash, check_port_clash
from reconciler.policy.rules.topology import check_topology
from reconciler.policy.verdict import RankBudget, Verdict, Violation
from reconciler.spec.lane import Lane
from reconciler.spec.load import DesiredState, PolicySet

Rule = Callable[[Context, RuleSettings], None]

RULES: dict[str, Rule] = {
    "topology": check_topology,
    "boot-utilization": check_boot_utilization,
    "host-sharing": check_host_sharing,
    "image-digest": check_image_digest,
    "model-revision": check_model_revision,
    "port-clash": check_port_clash,
    "name-clash": check_name_clash,
    "known-issues": check_known_issues,
    "secrets-by-name": check_secrets,
    "mounts": check_mounts,
    "model-disk": check_model_disk,
    "model-weights": check_model_weights,
}
"""Rules other than memory-budget (which also needs the budgets) and engine-flags (which reads the rendered
specs), in the order they run."""

assert set(RULES) | {"memory-budget", FLAGS_RULE} == set(RULE_PARAMS)

RULE_ORDER = {
    name: index for index, name in enumerate([RENDER_RULE, FLAGS_RULE, "memory-budget", *RULES, "policy-config"])
}


def _plans(ctx: Context, settings: Settings, reuse: Reuse | None) -> dict[str, LaneBudget]:
    rule = settings.configured.get("memory-budget")
    if rule is None:
        return {}
    params = BudgetParams.from_rule(rule)
    plans = {}
    for lane in ctx.desired.lanes.values():
        model = ctx.desired.models.get(lane.model)
        if model is None:
            continue
        make = partial(lane_budget, lane, model, ctx.capacity, params, ctx.host_memory)
        if reuse is None:
            plans[lane.name] = make()
        else:  # the same commit and policies: the same budget while its hosts' free memory at boot is the same
            reads = budget_reads(lane, ctx.capacity, ctx.host_memory)
            plans[lane.name] = reuse.get("memory-budget", lane.name, reads, make)
    return plans


def _sort_key(v: Violation) -> tuple[str, int, str, int, str]:
    return (
        v.lane or "",
        RULE_ORDER.get(v.rule, len(RULE_ORDER)),
        v.host or "",
        -1 if v.rank is None else v.rank,
        v.message,
    )


def evaluate(
    desired: DesiredState,
    policies: PolicySet,
    *,
    fix_ancestry: FixAncestry | None = None,
    host_memory: Mapping[str, HostMemory] | None = None,
    model_disks: ModelDisks | None = None,
    host_info: Mapping[str, HostInfo] | None = None,
    reuse: Reuse | None = None,
) -> Verdict:
    """Check one commit's desired state against the policy set.

    `fix_ancestry` answers the known-issues rule's questions about git builds (`ancestry.fix_questions`);
    without it those builds are judged by version alone, and their findings say ancestry was not checked.
    `host_memory` is what a probe read of the hosts' MemAvailable (`hostmem.from_observation`); without it
    free memory at boot comes from the hardware profiles, and every figure says which it used.
    `model_disks` is the free disk under each model path a probe measured (`diskfacts.disks_from_observation`);
    without it the model-disk rule says nothing. `host_info` is what the probe read of each host it reached
    (`ObservedFleet.host_info`), for the per-rank values lanes take from their hosts (`host_env`).
    `reuse`: the daemon's, across its cycles: a lane's ranks and budget are computed again only when the
    loaded commit or the facts they read changed (`policy.reuse`); the verdict is the same either way.
    """
    if reuse is not None:
        reuse.begin(desired, policies)
    settings = parse_rules(policies.rules)
    ctx = Context.build(
        desired, settings, capacities(policies.hardware), policies.known_issues, fix_ancestry, host_memory, model_disks
    )
    plans = _plans(ctx, settings, reuse)
    for name in settings.missing:
        ctx.violations.append(
            Violation(
                rule="policy-config",
                severity="warn",
                lane=None,
                host=None,
                rank=None,
                message=(
                    f"rule '{name}' is not configured in policies/rules.yaml, so it did not run; add it "
                    "(with enabled: false to turn it off on purpose)"
                ),
                detail={"missing_rule": name},
            )
        )
    rendered, render_findings = render_lanes(desired, host_info, reuse)
    ctx.violations.extend(render_findings)
    flags = settings.get(FLAGS_RULE)
    if flags is not None:
        check_engine_flags(ctx, flags, rendered)  # the render rule's specs: never rendered twice
    memory = settings.get("memory-budget")
    if memory is not None:
        check_memory_budget(ctx, memory, plans)
    ctx.plans = plans  # boot-utilization and host-sharing read each lane's figures in its engine's terms
    for name, rule in RULES.items():
        configured = settings.get(name)
        if configured is not None:
            rule(ctx, configured)
    budgets: list[RankBudget] = [rank for plan in plans.values() for rank in plan.ranks]
    budgets.sort(key=lambda b: (b.lane, b.rank))
    return Verdict(
        commit=desired.commit,
        violations=tuple(sorted(ctx.violations, key=_sort_key)),
        budgets=tuple(budgets),
        rendered=rendered,
        ports={name: lane_ports(desired.lanes[name]) for name in rendered},
    )


def lane_ports(lane: Lane) -> dict[str, str]:
    """Every port range the lane's ranks listen on, over all its ranks (`engines.ports`)."""
    spans: dict[str, tuple[int, int]] = {}
    for rank in range(lane.ranks):
        for what, (lo, hi) in listening(lane, rank).items():
            old = spans.get(what, (lo, hi))
            spans[what] = (min(old[0], lo), max(old[1], hi))
    return {what: str(lo) if lo == hi else f"{lo}-{hi}" for what, (lo, hi) in spans.items()}
