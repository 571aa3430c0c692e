"""Trials of proposed engine releases on spare hosts, measured against production.

A proposal for a lane with `track.trial_hosts` is run as a lane of its own
(`<lane>-trial`, the candidate image on the trial hosts) through the same
reconcile path as any lane, benchmarked with the lane's profile, its evidence
committed on the proposal branch, and removed again. What comes back is the
markdown the pull request shows: candidate against production, per metric.

Nothing of the trial comes from a commit the decider did not verify: the
candidate is the lane of the last verified and decided commit (through the
decider's one door, `Gate.act_on`) with only the image and engine_version the
proposal changes, and only a proposal commit whose parent is that commit is
tried. A proposal branched from an unsigned head (or any other lane change)
never reaches the trial hosts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pygit2
import structlog

from reconciler.bench import evidence
from reconciler.daemon.config import DaemonConfig
from reconciler.daemon.evidencejob import baseline_evidence, measure_and_commit
from reconciler.daemon.gate import Gate, UnverifiedCommitError
from reconciler.errors import InputError, LanesError
from reconciler.execute.cycle import CycleRunner, targets_for
from reconciler.execute.operations import Operations
from reconciler.execute.trials import TrialDisplacedError
from reconciler.source.loadcommit import LoadedCommit, load_commit
from reconciler.source.mirror import Mirror
from reconciler.spec.lane import Lane
from reconciler.spec.load import DesiredState
from reconciler.upstream.proposals import TrialFn

log = structlog.get_logger("lanes.trial")


def comparison_markdown(ev: dict[str, Any], lane: str) -> str:
    comparison = ev.get("comparison") or {}
    metrics = comparison.get("metrics") or []
    head = "### Trial on spare hosts\n\n"
    if not metrics:
        figures = ", ".join(evidence.headline(ev).values()) or "no figures"
        return head + f"Candidate measured ({figures}); no production evidence of `{lane}` to compare with yet.\n"
    rows = ["| metric | shape | production | candidate | change | |", "|---|---|---|---|---|---|"]
    for m in metrics:
        change = f"{m['relative']:+.1%}" if m.get("relative") is not None else f"{m['delta']:+.3g}"
        mark = {"better": "better", "worse": "**worse**"}.get(m["verdict"], "within noise")
        rows.append(f"| {m['metric']} | {m['shape']} | {m['baseline']:.4g} | {m['current']:.4g} | {change} | {mark} |")
    flag = (
        "\n**Regression:** " + "; ".join(comparison.get("regressions") or []) + "\n"
        if comparison.get("regression")
        else ""
    )
    return head + "\n".join(rows) + "\n" + flag


PROPOSED_FIELDS = frozenset({"image", "engine_version"})
"""What a proposal commit changes in a lane, and all a trial takes from it."""


def _candidate(config: DaemonConfig, mirror: Mirror, gate: Gate, lane: Lane, commit: str) -> tuple[Lane, LoadedCommit]:
    """The trial lane and the verified commit it runs against; UnverifiedCommitError when not allowed."""
    assert lane.track is not None
    base = gate.trusted
    if base is None:
        raise UnverifiedCommitError("no commit has been verified and decided yet")
    proposal = mirror.repo.revparse_single(commit).peel(pygit2.Commit)
    assert isinstance(proposal, pygit2.Commit)
    parents = [str(p) for p in proposal.parent_ids]
    if parents != [base]:
        raise UnverifiedCommitError(
            f"the proposal {commit[:12]} is not a child of the last verified commit {base[:12]} (parents: "
            f"{', '.join(p[:12] for p in parents) or 'none'})"
        )
    verified = gate.act_on(base)
    current = verified.desired.lanes.get(lane.name)
    if current is None:
        raise UnverifiedCommitError(f"lane {lane.name} is not in the verified commit {base[:12]}")
    proposed = load_commit(mirror.repo, commit, config.repo.state_dir, config.repo.policies_dir).desired.lanes.get(
        lane.name
    )
    if proposed is None or proposed.model_dump(exclude=set(PROPOSED_FIELDS)) != current.model_dump(
        exclude=set(PROPOSED_FIELDS)
    ):
        raise UnverifiedCommitError(
            f"the proposal {commit[:12]} changes lane {lane.name} beyond {', '.join(sorted(PROPOSED_FIELDS))}"
        )
    data = current.model_dump()
    data.update(
        name=f"{lane.name}-trial",
        image=proposed.image,
        engine_version=proposed.engine_version,
        hosts=list(lane.track.trial_hosts),
        desired="running",
        track=None,
        served_model_name=current.served_name,
    )
    return Lane.model_validate(data), verified


@dataclasses.dataclass(frozen=True)
class TrialReport:
    """What one trial of a candidate lane on spare hosts came to."""

    markdown: str
    measured: bool = False
    evidence_commit: str | None = None
    regression: bool = False


async def run_trial(
    config: DaemonConfig,
    runner: CycleRunner,
    mirror: Mirror,
    operations: Operations,
    candidate: Lane,
    loaded: LoadedCommit,
    *,
    production: str,
    baseline_at: str,
    branch: str,
    signing_parents: set[str] | None = None,
) -> TrialReport:
    """Run `candidate` (a lane of its own on spare hosts) beside `loaded`'s lanes, measure it against
    `production`'s evidence at `baseline_at`, commit the evidence on `branch`, and remove it again.

    The same path for a proposal's candidate and for a person's trial branch. `signing_parents`: with
    signed commits on, the evidence commit is signed with the evidence key and built only on these.
    It runs beside the daemon's cycles and lane operations, never holding them (`Operations.trial`): a
    commit that needs one of its hosts ends it, and a host a lane of the last plan runs on is not spare.
    """
    name = candidate.name
    desired: DesiredState = dataclasses.replace(loaded.desired, lanes={**loaded.desired.lanes, name: candidate})
    only = frozenset({name})

    async def attempt() -> TrialReport:
        try:
            result = await runner.run_cycle(
                LoadedCommit(loaded.commit, desired, loaded.policies), only_lanes=only, operations=operations
            )
            outcome = next((r for r in result.results if r.lane == name), None)
            if outcome is None or outcome.result != "applied":
                why = outcome.error if outcome else "not planned"
                return TrialReport(
                    f"### Trial on spare hosts\n\nThe candidate did not become healthy on "
                    f"{', '.join(candidate.hosts)}: {why}\n"
                )
            url = f"http://{targets_for(desired, config.overrides())[candidate.hosts[0]].address}:{candidate.port}"
            baseline = baseline_evidence(mirror, production, at=baseline_at)
            ev, made = await measure_and_commit(
                config, mirror, desired, name, url=url, baseline=baseline, commit=loaded.commit, branch=branch,
                parents=signing_parents,
            )  # fmt: skip
            log.info("trial.measured", lane=production, branch=branch, regression=bool(ev.get("regression")))
            return TrialReport(comparison_markdown(ev, production), True, made, bool(ev.get("regression")))
        except LanesError as exc:
            log.warning("trial.failed", lane=production, error=str(exc))
            return TrialReport(f"### Trial on spare hosts\n\nThe trial failed: {exc}\n")

    async def cleanup() -> None:
        stopped = candidate.model_copy(update={"desired": "stopped"})
        gone = dataclasses.replace(desired, lanes={**desired.lanes, name: stopped})
        await runner.run_cycle(
            LoadedCommit(loaded.commit, gone, loaded.policies), only_lanes=only, operations=operations
        )

    try:
        return await operations.trial((name,), tuple(candidate.hosts), attempt, cleanup)
    except TrialDisplacedError as exc:
        log.warning("trial.displaced", lane=production, hosts=list(candidate.hosts), reason=str(exc))
        return TrialReport(f"### Trial on spare hosts\n\nThe trial was {exc}\n")


def make_trial(
    config: DaemonConfig, runner: CycleRunner, mirror: Mirror, gate: Gate, operations: Operations
) -> TrialFn:
    async def trial(lane: Lane, commit: str, branch: str) -> str:
        try:
            candidate, loaded = _candidate(config, mirror, gate, lane, commit)
        except (UnverifiedCommitError, InputError, KeyError, ValueError, pygit2.GitError) as exc:
            log.warning("trial.refused", lane=lane.name, commit=commit[:12], reason=str(exc))
            return f"### Trial on spare hosts\n\nNot tried: {exc}\n"
        # The proposal commit is what is tried (its lanes are the verified commit's but for the image).
        tried = LoadedCommit(commit, loaded.desired, loaded.policies)
        report = await run_trial(
            config,
            runner,
            mirror,
            operations,
            candidate,
            tried,
            production=lane.name,
            baseline_at=loaded.commit,
            branch=branch,
        )
        return report.markdown

    return trial
