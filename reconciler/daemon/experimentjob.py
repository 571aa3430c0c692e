"""Experiments: a person's branch under `lanes/trials/` tried on the spare hosts, like a proposal.

The note's queue is ideas, not releases ("boot the 1017 build on stock vLLM", "probe an NVFP4 KV
cache"). Push them as a branch `lanes/trials/<name>` that changes lanes, and the daemon, every
`[experiments] interval_s`:

1. fetches the trial branches and takes each head it has not tried yet (the evidence commit a
   trial adds on top is recorded with it, so it is never taken for a new idea);
2. checks the head as it checks the watched branch: an allowed signature when signed commits are
   required, files that load, and no deny of a lane it changes;
3. runs each changed lane as `<lane>-trial` on the spare hosts (`[experiments] hosts`, or the
   lane's `track.trial_hosts` on the branch), through the same reconcile path as every lane
   (`trialjob.run_trial`, the path proposals use), benchmarks it against production's latest
   evidence, commits the evidence on the branch and removes the trial again;
4. posts the comparison on the branch's pull request (`[forge]`); a branch without one gets it
   posted once a pull request is open, and a notification either way.

Trials run beside the daemon's cycles, never holding them (`Operations.trial`): a trial lane is in
flight, so no cycle takes it for a lane removed from the state, and a commit that needs one of its
hosts ends it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping

import httpx
import pygit2
import structlog

from reconciler.daemon.config import DaemonConfig
from reconciler.daemon.decider import CommitDecider
from reconciler.daemon.trialjob import run_trial
from reconciler.daemon.trialsettings import TRIAL_BRANCH_PREFIX
from reconciler.errors import InputError, LanesError
from reconciler.execute.cycle import CycleRunner
from reconciler.execute.operations import Operations
from reconciler.notifications import hub as notifications
from reconciler.policy.evaluate import evaluate
from reconciler.source.loadcommit import load_commit
from reconciler.source.mirror import Mirror
from reconciler.spec.lane import Lane
from reconciler.store.experiments import experiment, mark_posted, record_experiment
from reconciler.store.journal import Store
from reconciler.upstream.ancestry import fix_ancestry
from reconciler.upstream.base import read_credential
from reconciler.upstream.bounded import BoundedTransport
from reconciler.upstream.forge import comment_on_pull, find_open_pull

log = structlog.get_logger("lanes.trial")
FORGE_TIMEOUT_S = 30.0


@dataclasses.dataclass(frozen=True)
class Tried:
    """One branch head's trial: what the record, the pull request and the notification say."""

    state: str
    """measured | not-tried | failed | no-change"""
    summary: str
    lanes: tuple[str, ...] = ()
    markdown: str = ""
    evidence_commit: str | None = None
    regression: bool = False


def changed_lanes(branch: Mapping[str, Lane], production: Mapping[str, Lane]) -> list[str]:
    """Lanes the branch adds or changes that are to run (a lane it stops or removes is nothing to try)."""
    return sorted(
        name
        for name, lane in branch.items()
        if lane.desired == "running"
        and not lane.suspended
        and (name not in production or production[name].model_dump() != lane.model_dump())
    )


def trial_lane(lane: Lane, spare: tuple[str, ...]) -> Lane:
    """`lane` as `<lane>-trial` on the first spare hosts (as many as it has ranks' hosts); ValueError if too few."""
    hosts = lane.track.trial_hosts if lane.track is not None and lane.track.trial_hosts else spare
    if len(hosts) < len(lane.hosts):
        raise ValueError(
            f"lane {lane.name} runs on {len(lane.hosts)} host(s) and only {len(hosts)} spare host(s) are named "
            "([experiments] hosts, or track.trial_hosts)"
        )
    data = lane.model_dump()
    data.update(
        name=f"{lane.name}-trial",
        hosts=list(hosts[: len(lane.hosts)]),
        track=None,
        served_model_name=lane.served_name,
        desired="running",
    )
    return Lane.model_validate(data)


class ExperimentJob:
    def __init__(
        self,
        config: DaemonConfig,
        decider: CommitDecider,
        runner: CycleRunner,
        mirror: Mirror,
        store: Store,
        operations: Operations,
    ) -> None:
        self.config = config
        self.decider = decider
        self.runner = runner
        self.operations = operations
        self.mirror = mirror
        self.store = store

    async def run(self) -> None:
        branches = await asyncio.to_thread(self.mirror.fetch_branches, TRIAL_BRANCH_PREFIX)
        base = self.decider.trusted
        if base is None:
            return  # nothing verified yet: no production to compare with
        for branch, head in sorted(branches.items()):
            known = experiment(self.store, branch, head)
            if known is None:
                await self._try(branch, head, base)
            elif not known.get("posted") and known.get("report"):
                await self._post(branch, str(known["commit_sha"]), str(known["report"]))

    async def _try(self, branch: str, head: str, base: str) -> None:
        log.info("trial.branch", branch=branch, commit=head[:12])
        tried = await self._outcome(branch, head, base)
        record_experiment(
            self.store,
            branch,
            head,
            state=tried.state,
            summary=tried.summary,
            lanes=",".join(tried.lanes),
            report=tried.markdown,
            evidence_commit=tried.evidence_commit,
            posted=0,
        )
        where = await self._post(branch, head, tried.markdown)
        notifications.on_trial(
            branch, head, tried.lanes, tried.summary, where, tried.regression, self.decider.last_desired
        )

    async def _outcome(self, branch: str, head: str, base: str) -> Tried:
        heading = f"## Trial of `{branch}` at {head[:12]}\n\n"
        refusal = self.decider.signature_refusal(head)
        if refusal is not None:
            return _not_tried(heading, f"the commit is not accepted: {refusal}")
        repo = self.config.repo
        try:
            loaded = load_commit(self.mirror.repo, head, repo.state_dir, repo.policies_dir)
            production = self.decider.act_on(base)
        except (InputError, KeyError, ValueError, pygit2.GitError) as exc:
            why = exc.describe() if isinstance(exc, InputError) else str(exc)
            return _not_tried(heading, f"the branch's files do not load: {why}")
        names = changed_lanes(loaded.desired.lanes, production.desired.lanes)
        if not names:
            return Tried("no-change", "changes no lane that runs", markdown=heading + "It changes no lane that runs.\n")
        data_dir = self.config.poll_settings().data_dir
        answers = fix_ancestry(loaded.desired, loaded.policies.known_issues, data_dir)
        verdict = evaluate(loaded.desired, loaded.policies, fix_ancestry=answers)
        denials = [
            f"{v.rule} ({v.lane}): {v.message}" for v in verdict.violations if v.severity == "deny" and v.lane in names
        ]
        if denials:
            return _not_tried(heading, "the policies deny it: " + "; ".join(denials), tuple(names))
        sections: list[str] = []
        made: str | None = None
        regression, measured = False, 0
        # Evidence commits build on the branch's local head in the mirror (as on a proposal branch).
        with self.mirror.lock:
            self.mirror.repo.references.create(f"refs/heads/{branch}", pygit2.Oid(hex=head), force=True)
        for name in names:
            try:
                candidate = trial_lane(loaded.desired.lanes[name], self.config.experiments.hosts)
                missing = [h for h in candidate.hosts if h not in loaded.desired.hosts]
                if missing:
                    raise ValueError(f"spare host(s) {', '.join(missing)} are not in the branch's hosts")
            except ValueError as exc:
                sections.append(f"### {name}\n\nNot tried: {exc}\n")
                continue
            report = await run_trial(
                self.config,
                self.runner,
                self.mirror,
                self.operations,
                candidate,
                loaded,
                production=name,
                baseline_at=base,
                branch=branch,
                signing_parents={head, *([made] if made else [])},
            )
            sections.append(f"### {name} on {', '.join(candidate.hosts)}\n\n" + _demote(report.markdown))
            made = report.evidence_commit or made
            regression = regression or report.regression
            measured += report.measured
        state = "measured" if measured == len(names) else "failed"
        summary = (
            f"measured {measured} of {len(names)} lane(s)" + (", a regression" if regression else "")
            if measured
            else "not measured"
        )
        return Tried(state, summary, tuple(names), heading + "\n".join(sections), made, regression)

    async def _post(self, branch: str, commit: str, markdown: str) -> str | None:
        """Post on the branch's open pull request; its URL, or None (no forge, no pull request yet, an error)."""
        forge = self.config.forge.settings()
        if forge is None or not markdown:
            return None
        try:
            token = (
                read_credential(self.config.forge.token_dir(), forge.token_credential)
                if forge.token_credential
                else None
            )
            # The forge's answers are capped like every upstream's (upstream.bounded).
            transport = BoundedTransport(httpx.AsyncHTTPTransport())
            async with httpx.AsyncClient(timeout=FORGE_TIMEOUT_S, transport=transport) as client:
                found = await find_open_pull(client, forge, token, branch)
                if found is None:
                    log.info("trial.no_pull_request", branch=branch, commit=commit[:12])
                    return None
                number, url = found
                await comment_on_pull(client, forge, token, number, markdown)
        except LanesError as exc:
            log.warning("trial.post_failed", branch=branch, error=str(exc))
            return None
        mark_posted(self.store, branch, commit, url)
        log.info("trial.posted", branch=branch, commit=commit[:12], pull=url)
        return url


def _not_tried(heading: str, why: str, lanes: tuple[str, ...] = ()) -> Tried:
    return Tried("not-tried", f"not tried: {why}", lanes, heading + f"Not tried: {why}\n")


def _demote(markdown: str) -> str:
    """A trial's own heading goes under the lane's (one level down)."""
    return markdown.replace("### Trial on spare hosts\n\n", "", 1)
