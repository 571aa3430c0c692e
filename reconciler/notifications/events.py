"""What the daemon tells people: one event per thing that happened, with the command that helps.

Each event says what happened, to which lane (or host) and commit, and what a
person can do about it, as a command they can paste. Events are built from
what the daemon already knows (a cycle's results, a refusal, an evidence
commit, a proposal), never from text a receiver could not show: the key
(kind, subject, commit) is what a repeat is recognised by.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from reconciler.execute.cycle import CycleResult
from reconciler.execute.results import Result
from reconciler.facts.enginelog import with_engine_words
from reconciler.plan.steps import Cause
from reconciler.spec.load import DesiredState


@dataclass(frozen=True)
class Event:
    kind: str
    title: str
    what: str
    action: str
    commit: str | None = None
    lanes: tuple[str, ...] = ()
    """The lanes the event is about (none: the whole fleet, e.g. a refused head)."""
    host: str | None = None
    labels: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """The labels of the hosts involved, key -> values, for routing."""
    severity: str = "warning"
    """Apprise's notify type: info, success, warning or failure."""
    episode: str = ""
    """Tells apart two occurrences at one commit that are not repeats (a host down, back, and down again)."""

    @property
    def key(self) -> tuple[str, str, str]:
        """(kind, subject, commit): the same event again is a repeat."""
        subject = self.host or ",".join(self.lanes) or "-"
        return (self.kind, subject + (f"#{self.episode}" if self.episode else ""), self.commit or "-")

    def body(self) -> str:
        lines = [self.what]
        if self.lanes:
            lines.append(f"Lane: {', '.join(self.lanes)}")
        if self.host:
            lines.append(f"Host: {self.host}")
        if self.commit:
            lines.append(f"Commit: {self.commit[:12]}")
        lines.append(f"What you can do: {self.action}")
        return "\n".join(lines)


def _labels(desired: DesiredState | None, hosts: Iterable[str]) -> dict[str, frozenset[str]]:
    out: dict[str, set[str]] = {}
    if desired is None:
        return {}
    for name in hosts:
        host = desired.hosts.get(name)
        for key, value in (host.labels if host else {}).items():
            out.setdefault(key, set()).add(value)
    return {k: frozenset(v) for k, v in out.items()}


def _lane_labels(desired: DesiredState, lane: str) -> dict[str, frozenset[str]]:
    spec = desired.lanes.get(lane)
    return _labels(desired, spec.hosts if spec else ())


GAVE = frozenset({"stop", "noop"})
"""A rolled-back lane planned to stop (or stopped before a restart): a swap gave its hosts back to it
(`reconciler.execute.swap`); a lane whose own change failed was planned to deploy or verify."""


ROLLOUTS = frozenset({Cause.FIRST_DEPLOY, Cause.SPEC_CHANGED})
"""Applies that are a rollout of a commit (a repair of drift puts back what was there: not a rollout)."""


def _short(text: str | None, limit: int = 600) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cycle_events(result: CycleResult, desired: DesiredState) -> list[Event]:
    """Denied, failed, rolled-back and rolled-out lanes of one reconcile cycle."""
    events = []
    commit = result.commit
    for r in result.results:
        labels = _lane_labels(desired, r.lane)
        # The gate says "a rank exited"; the engine's own last words say why (vLLM's "unrecognized arguments").
        error = with_engine_words(r.error, r.logs)
        logs = f"read the rank logs with `lanes logs {r.lane}` (`--rank N` for the others)"
        if r.result == Result.APPLIED and r.action == "deploy" and r.cause in ROLLOUTS:
            events.append(
                Event(
                    "lane.rolled_out",
                    f"lanes: {r.lane} rolled out ({commit[:12]})",
                    f"Lane {r.lane} serves the spec of commit {commit[:12]}: it passed its readiness gate"
                    + (f" in {r.timings['total']:.0f} s." if isinstance(r.timings.get("total"), int | float) else "."),
                    f"nothing; `lanes status` shows it, `lanes bench {r.lane}` measures it",
                    commit=commit,
                    lanes=(r.lane,),
                    labels=labels,
                    severity="success",
                )
            )
        elif r.result == Result.DENIED:
            violations = [v for v in result.verdict.lane_violations(r.lane) if v.severity == "deny"]
            rules = ", ".join(sorted({v.rule for v in violations})) or "policy"
            why = "; ".join(_short(v.message, 300) for v in violations[:3]) or _short(r.error)
            events.append(
                Event(
                    "commit.denied",
                    f"lanes: {r.lane} denied by policy ({rules}) at {commit[:12]}",
                    f"The commit's spec of lane {r.lane} breaks the policy {rules}: {why}. The lane keeps running "
                    "its last good spec.",
                    f"see why with `lanes check --rev {commit}`; fix the lane file and push a new commit",
                    commit=commit,
                    lanes=(r.lane,),
                    labels=labels,
                )
            )
        elif r.result == Result.ROLLED_BACK and r.action in GAVE:
            events.append(
                Event(
                    "lane.rolled_back",
                    f"lanes: swap rolled back, {r.lane} serves its previous spec again ({commit[:12]})",
                    f"{_short(r.error)}. The hosts it gave up went back to it: it serves its previous spec while "
                    "the commit wants it stopped.",
                    "find the lane that failed to take the hosts with `lanes status`; fix its lane file and push, "
                    "or revert the commit; `lanes retry` names that lane, not this one",
                    commit=commit,
                    lanes=(r.lane,),
                    labels=labels,
                    severity="failure",
                )
            )
        elif r.result == Result.ROLLED_BACK:
            events.append(
                Event(
                    "lane.rolled_back",
                    f"lanes: {r.lane} rollout failed and was rolled back ({commit[:12]})",
                    f"The rollout of lane {r.lane} failed ({_short(error)}) and the lane was put back on its last "
                    "healthy spec. The failed spec is not tried again until its backoff ends or a person allows it.",
                    f"{logs}; fix the lane file and push, or once the cause is gone run `lanes retry {r.lane}`",
                    commit=commit,
                    lanes=(r.lane,),
                    labels=labels,
                    severity="failure",
                )
            )
        elif r.result == Result.FAILED and r.untouched:
            events.append(
                Event(
                    "lane.failed",
                    f"lanes: {r.lane} rollout failed before anything stopped ({commit[:12]})",
                    f"The rollout of lane {r.lane} failed before any of its ranks was stopped: {_short(error)}. "
                    "Nothing was stopped; the old spec still serves (if it served before).",
                    f"fix the cause (the image, the model path, the hosts) or the lane file and push, then "
                    f"`lanes retry {r.lane}`; `lanes status` shows what serves",
                    commit=commit,
                    lanes=(r.lane,),
                    labels=labels,
                    severity="failure",
                )
            )
        elif r.result == Result.FAILED:
            events.append(
                Event(
                    "lane.failed",
                    f"lanes: {r.lane} rollout failed ({commit[:12]})",
                    f"The rollout of lane {r.lane} failed: {_short(error)}. Its ranks were stopped (or it had "
                    "none) and nothing healthy was there to roll back to, or the rollback failed too: the lane serves "
                    "nothing now.",
                    f"{logs}; fix the cause or the lane file and push, then `lanes retry {r.lane}`",
                    commit=commit,
                    lanes=(r.lane,),
                    labels=labels,
                    severity="failure",
                )
            )
    return events


class Refusal(StrEnum):
    """Why a head was refused, as the decider found it (the reason beside it is for people)."""

    SIGNATURE = "signature"
    """Unsigned, or signed by a key the allowed signers file does not name."""
    REWIND = "rewind"
    """It does not descend from the last applied commit (a force-push), and no operator allowed it."""


def refused_event(commit: str, reason: str, kind: Refusal) -> Event:
    """The head was refused (unsigned, a signer not allowed, or a rewind nobody allowed)."""
    action = (
        f'if the force-push was meant, allow it with `lanes allow-rewind {commit} --reason "..."`; '
        "otherwise push the branch back onto the last applied commit"
        if kind == Refusal.REWIND
        else "sign the commit with a key in the allowed signers and push it again (`git commit -S --amend`), "
        "or add the signer to the allowed signers file"
    )
    return Event(
        "commit.refused",
        f"lanes: commit {commit[:12]} refused",
        f"The daemon refused the head commit: {_short(reason)}. Every lane keeps what it runs.",
        action,
        commit=commit,
        severity="failure",
    )


class HostWatch:
    """Which hosts answered the last probe, so a host is reported when it stops answering and when it is back."""

    def __init__(self) -> None:
        self.down: dict[str, tuple[str, int]] = {}
        """Hosts not answering: the reason, and the number of their outage."""
        self.outages = 0

    def events(self, result: CycleResult, desired: DesiredState) -> list[Event]:
        events = []
        for name, host in sorted(result.observed.hosts.items()):
            lanes = tuple(sorted(n for n, lane in desired.lanes.items() if name in lane.hosts))
            labels = _labels(desired, (name,))
            if not host.reachable and name not in self.down:
                self.outages += 1
                self.down[name] = (host.error or "no answer", self.outages)
                held = f" Lanes held until it answers: {', '.join(lanes)}." if lanes else ""
                events.append(
                    Event(
                        "host.unreachable",
                        f"lanes: host {name} stopped answering",
                        f"Host {name} did not answer the daemon's probe ({_short(host.error, 300)}).{held}",
                        f"check the host's power and network, then `lanes hosts --host {name}`; the daemon retries "
                        "by itself",
                        commit=result.commit,
                        lanes=lanes,
                        host=name,
                        labels=labels,
                        severity="failure",
                        episode=str(self.outages),
                    )
                )
            elif host.reachable and name in self.down:
                was, outage = self.down.pop(name)
                events.append(
                    Event(
                        "host.back",
                        f"lanes: host {name} answers again",
                        f"Host {name} answers the daemon's probe again (it had stopped: {_short(was, 200)}); its "
                        "lanes are reconciled again.",
                        "nothing; `lanes status` shows its lanes converge",
                        commit=result.commit,
                        lanes=lanes,
                        host=name,
                        labels=labels,
                        severity="success",
                        episode=str(outage),
                    )
                )
        return events


def regression_event(
    lane: str, commit: str, evidence_commit: str, ev: Mapping[str, Any], desired: DesiredState
) -> Event:
    """An evidence commit flagged a throughput regression against the lane's previous evidence."""
    comparison = ev.get("comparison") or {}
    worse = "; ".join(str(x) for x in (comparison.get("regressions") or [])[:3]) or "throughput below the baseline"
    # The commit a cycle applied may be a later one than the change (evidence commits land on top of a
    # person's push), so the message points at the lane's history for the change rather than naming it.
    return Event(
        "evidence.regression",
        f"lanes: {lane} got slower (benchmark at {commit[:12]})",
        f"The benchmark of lane {lane} at commit {commit[:12]} measured a regression against its previous "
        f"evidence: {worse} (evidence commit {evidence_commit[:12]}).",
        f"find the change that did it with `lanes history {lane}`; if it is to blame, revert it "
        "(`git revert <that commit>`) and push",
        commit=commit,
        lanes=(lane,),
        labels=_lane_labels(desired, lane),
    )


def proposal_event(
    lane: str, version: str | None, branch: str | None, pr_url: str | None, base: str, desired: DesiredState
) -> Event:
    """The upstream job opened a proposal (a branch, and a pull request where the forge is known)."""
    where = pr_url or f"branch {branch}"
    return Event(
        "proposal.opened",
        f"lanes: proposal for {lane}: {version or 'a new release'}",
        f"A new upstream release ({version or 'unknown version'}) of lane {lane}'s engine was proposed: {where}.",
        f"review it ({where}), check it with `lanes check --rev {branch}` and merge it to roll it out"
        if branch
        else f"review it ({where}) and merge it to roll it out",
        commit=base,
        lanes=(lane,),
        labels=_lane_labels(desired, lane),
        severity="info",
    )


def trial_event(
    branch: str,
    commit: str,
    lanes: tuple[str, ...],
    outcome: str,
    where: str | None,
    regression: bool,
    desired: DesiredState | None,
) -> Event:
    """A trial branch was tried on the spare hosts (measured, or refused or failed with the reason)."""
    place = where or f"branch {branch}"
    return Event(
        "trial.reported",
        f"lanes: trial {branch.removeprefix('lanes/trials/')}: {outcome.splitlines()[0][:80]}",
        f"The trial branch {branch} at {commit[:12]} ({', '.join(lanes) or 'no lane changed'}): {outcome}. "
        f"The comparison is at {place}.",
        f"read it ({place}); merge the branch to roll the change out, or push to it to try again",
        commit=commit,
        lanes=lanes,
        labels=_labels(desired, [h for lane in lanes for h in _lane_hosts(desired, lane)]),
        severity="warning" if regression else "info",
    )


def _lane_hosts(desired: DesiredState | None, lane: str) -> tuple[str, ...]:
    found = desired.lanes.get(lane) if desired is not None else None
    return found.hosts if found is not None else ()
