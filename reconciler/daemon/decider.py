"""What the daemon decides about one commit, and where it writes that down.

A head commit is refused when it must be signed and is not, or (signing on)
when it does not descend from the last commit applied and no operator allowed
that rewind (`lanes allow-rewind`); rejected when its files do not load, and
otherwise reconciled (lanes denied by policy keep their last good state).
`act_on` is the one door to a commit the daemon acts on (`reconciler.daemon.gate`):
the cycle, proposals and trials all go through it. Every decision goes to the journal, to a git note on
the commit (`git log --notes=lanes` on any clone shows it) and to metrics.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal

import pygit2
import structlog

from reconciler.daemon.commitrun import CommitRun
from reconciler.daemon.config import DaemonConfig
from reconciler.daemon.evidencejob import benchmark_changed
from reconciler.daemon.gate import UnverifiedCommitError
from reconciler.daemon.metrics import Metrics
from reconciler.errors import InputError, LanesError
from reconciler.execute.apply import ProgressEvent
from reconciler.execute.cycle import CycleResult, CycleRunner
from reconciler.execute.operations import Operation, Operations
from reconciler.execute.results import LaneResult, Result
from reconciler.facts.enginelog import with_engine_words
from reconciler.notifications import hub as notifications
from reconciler.notifications.events import Refusal
from reconciler.plan.reaction import hosts_first, reaction
from reconciler.plan.steps import Cause
from reconciler.source.acceptance import Signers, accepted
from reconciler.source.loadcommit import LoadedCommit, load_commit
from reconciler.source.mirror import Mirror
from reconciler.source.notes import write_verdict_note
from reconciler.spec.load import DesiredState
from reconciler.store.journal import Store
from reconciler.store.status import instant_text
from reconciler.store.trust import allowed_rewind, anchor, set_anchor

log = structlog.get_logger("lanes.daemon")


def log_progress(event: ProgressEvent) -> None:
    """Every step of every lane transaction as one event (the commit is bound by `decide`)."""
    method = log.warning if event.status == "failed" else log.info
    method(f"lane.{event.step}.{event.status}", lane=event.lane, detail=event.detail)


class CommitDecider:
    def __init__(
        self,
        config: DaemonConfig,
        store: Store,
        runner: CycleRunner,
        mirror: Mirror,
        metrics: Metrics,
        operations: Operations | None = None,
        on_settled: Callable[[bool], None] | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.runner = runner
        self.mirror = mirror
        self.metrics = metrics
        self.operations = operations
        """Where the daemon's lane changes run (None: each cycle applies and waits, as `lanes apply` does)."""
        self.on_settled = on_settled or (lambda _replan: None)
        """Called when an operation ended, with whether lanes wait for it (deferred behind it, or the newest
        spec of a preempted lane): the daemon then plans again; else it only reschedules its retries."""
        self._replan = False
        """The last cycle left lanes for later (deferred, preempted): the next operation to end plans again."""
        self.open: dict[str, CommitRun] = {}
        """Commits with lane operations in flight."""
        self.last_desired: DesiredState | None = None
        self.last_result: CycleResult | None = None
        """The last cycle's verdict, probe and plan: the dashboard shows its budgets and host facts."""
        self._latest: tuple[str, dict[str, LaneResult]] = ("", {})
        """The newest result of each lane at a commit (cycles and operations): a lane-scoped cycle's record."""
        self.blocked: dict[str, str] = {}
        """Lanes the last cycle could not act on, and why (a host leased by another reconciler, unreachable)."""
        self._loaded: tuple[tuple[str, str, str], LoadedCommit] | None = None
        self._trusted: str | None = None
        self.refused: dict[str, str] | None = None
        """The head refused last ({"commit", "reason"}), None once a head is applied; /status shows it."""
        self._signatures: dict[tuple[str, ...], tuple[bool, str | None, str]] = {}
        self._previous: LoadedCommit | None = None
        """The commit the last cycle acted on: a new head's changed lanes are found against it."""
        self.reacted = False
        """The last cycle was a commit's reaction: the full cycle is due at once (the daemon kicks it)."""

    @property
    def trusted(self) -> str | None:
        """The last commit verified and decided: the only base of proposals and trials."""
        return self._trusted

    def act_on(self, sha: str) -> LoadedCommit:
        """The one door: `sha`'s state and policies once it passes every check the head passes."""
        refusal = self.refusal(sha)
        if refusal is not None:
            raise UnverifiedCommitError(refusal)
        return self._load(sha)

    def _load(self, head: str) -> LoadedCommit:
        """The commit's state and policies, parsed once per commit.

        A commit never changes, and a resync of an unchanged head would
        otherwise parse every file again (0.5 s at 1,000 hosts). The folders
        are part of the key: a reloaded config may point elsewhere.
        """
        key = (head, str(self.config.repo.state_dir), str(self.config.repo.policies_dir))
        if self._loaded is not None and self._loaded[0] == key:
            return self._loaded[1]
        loaded = load_commit(self.mirror.repo, head, self.config.repo.state_dir, self.config.repo.policies_dir)
        self._loaded = (key, loaded)
        return loaded

    async def decide(self, head: str, only_lanes: frozenset[str] | None = None) -> str:
        """`only_lanes`: an operator asked for these lanes now (`lanes reconcile --lane`): only they are planned
        and acted on; the commit's record keeps the other lanes' results from its last full cycle."""
        t0 = time.monotonic()
        structlog.contextvars.bind_contextvars(commit=head[:12])
        try:
            refused = self._refused(head)
            if refused is not None:
                kind, refusal = refused
                self.refused = {"commit": head, "reason": refusal}
                await self._record(head, "refused", {"refused": refusal})
                notifications.on_refused(head, refusal, kind)
                self.metrics.record_cycle(time.monotonic() - t0, error=refusal)
                return "refused"
            self.refused = None
            try:
                loaded = self.act_on(head)
            except InputError as exc:
                await self._record(head, "invalid", {"refused": f"invalid state: {exc.describe()}"})
                self.metrics.record_cycle(time.monotonic() - t0, error=exc.describe())
                return "invalid"
            await self._superseded_reactions(head)
            reaction = self._reaction(loaded) if only_lanes is None else None
            self.reacted = reaction is not None
            first = None
            if reaction is not None:
                only_lanes, first = reaction
            elif only_lanes is not None:  # an operator's `lanes reconcile --lane`: its lanes' hosts are probed
                first = hosts_first(only_lanes, loaded.desired, loaded.desired, self.runner.probes.last_seen())
            self._previous = loaded
            self.last_desired = loaded.desired
            self._trusted = head
            if anchor(self.store) != head:
                set_anchor(self.store, head)
            if self.operations is None:
                result = await self.runner.run_cycle(loaded, progress=log_progress)
            else:
                result = await self.runner.start_cycle(
                    loaded,
                    self.operations,
                    self._operation_done,
                    progress=log_progress,
                    judged=self._judged,
                    only_lanes=only_lanes,
                    first=first,
                )
            result = self._with_others(result, only_lanes)
            notifications.on_cycle(result, loaded.desired)
            self.metrics.record_cycle(time.monotonic() - t0, result.results)
            # Only what another reconciler or a host holds up is looked at again soon; a condemned spec
            # waits for a change, and a spec in backoff for its own time (the service schedules both).
            self.blocked = {
                r.lane: r.error or "blocked"
                for r in result.results
                if r.result == Result.BLOCKED and r.cause in {Cause.LEASE_HELD, Cause.UNREACHABLE}
            }  # a lane-scoped cycle carries the other lanes' last results (`_with_others`): theirs stand
            for lane, why in sorted(self.blocked.items()):
                log.info("lane.blocked", lane=lane, reason=why)
            self.metrics.blocked.set(len(self.blocked))
            self._replan = bool(result.deferred or result.preempted)
            run = self.open.get(head)
            if result.started or result.judging or run is not None:
                if run is None:
                    run = self.open[head] = CommitRun(loaded, result, reaction=first is not None)
                elif run.reaction and first is None:  # the full cycle after a reaction: its verdict and probe
                    run.cycle, run.reaction = result, False
                run.add(result.results)
                run.open.update(result.started)
                run.judging = set(result.judging)
                if run.open or run.judging or run.reaction:
                    log.info(
                        "cycle.done",
                        outcome="progressing",
                        in_flight=sorted(run.open),
                        preempted=result.preempted,
                        seconds=round(time.monotonic() - t0, 3),  # every cycle.done says how long it took
                    )
                    return "progressing"
                del self.open[head]
                result = run.merged()
            elif first is not None:  # a reaction that started nothing: the full cycle decides the commit
                log.info("cycle.done", outcome="reacted", seconds=round(time.monotonic() - t0, 3))
                return "progressing"
            return await self._conclude(head, loaded, result, t0)
        finally:
            structlog.contextvars.unbind_contextvars("commit")

    def _reaction(self, loaded: LoadedCommit) -> tuple[frozenset[str], frozenset[str]] | None:
        """For a new head, the lanes it changes and the hosts to probe before acting on them
        (`plan.reaction`); None when the full cycle should run at once (the first commit, a resync, a change
        every lane reads, or one whose hosts are most of the fleet)."""
        previous = self._previous
        if self.operations is None or previous is None or previous.commit == loaded.commit:
            return None
        old, new, seen = previous, loaded, self.runner.probes.last_seen()
        found = reaction(old.desired, old.policies, new.desired, new.policies, seen)
        if found is not None:
            log.info("cycle.reaction", lanes=sorted(found[0]), hosts=len(found[1]))
        return found

    async def _superseded_reactions(self, head: str) -> None:
        """A newer head came before the full cycle of an earlier commit's reaction: that commit is decided by
        what its operations did, as any commit a newer one overtook (none of its other lanes will be planned)."""
        for commit, run in list(self.open.items()):
            if commit == head or not run.reaction:
                continue
            run.reaction = False
            if not run.open and not run.judging:
                del self.open[commit]
                await self._conclude(commit, run.loaded, run.merged(), run.t0)

    def _with_others(self, result: CycleResult, only_lanes: frozenset[str] | None) -> CycleResult:
        """The cycle's result as the commit's: a full cycle's is kept as the last (the dashboard draws its
        plan); a lane-scoped one adds the other lanes' results from the last full cycle at this commit."""
        last, (commit, latest) = self.last_result, self._latest
        if commit != result.commit:
            latest = {}
        if only_lanes is None or last is None or commit != result.commit:
            self.last_result = result
            self._latest = (result.commit, {**latest, **{r.lane: r for r in result.results}})
            return result
        mine = [r for r in result.results if r.lane in only_lanes]
        others = [r for lane, r in latest.items() if lane not in only_lanes]
        merged = replace(result, results=others + mine)
        self._latest = (commit, {**latest, **{r.lane: r for r in mine}})
        self.last_result = replace(last, results=merged.results)
        return merged

    def _judged(self) -> None:
        """A preflight ended: the lanes it held back are planned again, with its verdicts."""
        self.on_settled(True)

    async def _operation_done(self, op: Operation, results: list[LaneResult]) -> None:
        """An operation ended: its lanes' results join its commit's; the last one writes the commit's record."""
        structlog.contextvars.bind_contextvars(commit=op.commit[:12])
        try:
            run = self.open.get(op.commit)
            if run is None:  # pragma: no cover - every operation is started by a cycle that opened its commit
                log.warning("operation.orphaned", lanes=list(op.lanes))
                return
            ended = replace(run.cycle, results=results, started=(), in_flight=())
            notifications.on_cycle(ended, run.loaded.desired)
            self.metrics.record_cycle(time.monotonic() - run.t0, results)
            for r in results:  # a lease another reconciler took while this operation waited for it
                if r.result == Result.BLOCKED and r.cause in {Cause.LEASE_HELD, Cause.UNREACHABLE}:
                    self.blocked[r.lane] = r.error or "blocked"
            run.add(results)
            if self._latest[0] == op.commit:
                self._latest[1].update({r.lane: r for r in results})
            run.open.difference_update(op.lanes)
            if not run.open and not run.judging and not run.reaction:
                del self.open[op.commit]
                await self._conclude(op.commit, run.loaded, run.merged(), run.t0)
        finally:
            structlog.contextvars.unbind_contextvars("commit")
            self.on_settled(self._replan)

    async def _conclude(self, head: str, loaded: LoadedCommit, result: CycleResult, t0: float) -> str:
        """A commit's lanes all ended: its outcome recorded (journal, note), and what changed benchmarked."""
        outcome = self._outcome(result)
        changed = any(r.result != "noop" for r in result.results)
        recorded = self.store.commit_outcome(head)
        if recorded is None:  # resyncs of the same commit must not count its denials again
            self.metrics.record_denials(v.rule for v in result.verdict.violations if v.severity == "deny")
        verdict = self._verdict(result)
        if recorded is None or recorded["outcome"] != outcome or (changed and not _repeats(recorded, verdict)):
            await self._record(head, outcome, verdict)
        await benchmark_changed(self.config, loaded.desired, result, self.mirror, self.store)
        log.info("cycle.done", outcome=outcome, seconds=round(time.monotonic() - t0, 3))
        return outcome

    def refusal(self, sha: str) -> str | None:
        """Why `sha` must not be acted on, or None: with signing on, an allowed signature and no rewind."""
        refused = self._refused(sha)
        return refused[1] if refused is not None else None

    def _refused(self, sha: str) -> tuple[Refusal, str] | None:
        """`refusal`, with which rule refused it."""
        mode = self.config.repo.require_signed_commits
        if not mode:
            return None
        ok, signer, reason = self._signature(sha, mode)
        if not ok:
            log.warning("commit.refused", reason=reason)
            return Refusal.SIGNATURE, reason
        if sha != self._trusted:
            log.info("commit.signed", signer=signer)
        rewind = self._rewind(sha)
        return (Refusal.REWIND, rewind) if rewind is not None else None

    def signature_refusal(self, sha: str) -> str | None:
        """Why `sha` of a side branch (a trial branch) must not run anywhere: only its signature counts.

        A trial branch needs not descend from the last applied commit (it was branched earlier), so the
        rewind rule of the watched branch does not apply; the signature rule does, in full.
        """
        mode = self.config.repo.require_signed_commits
        if not mode:
            return None
        ok, _, reason = self._signature(sha, mode)
        return None if ok else reason

    def _signature(self, sha: str, mode: Literal["ssh", "gpg"]) -> tuple[bool, str | None, str]:
        """A commit's signature verdict, once per commit and signers files (ssh-keygen costs a fork)."""
        repo = self.config.repo
        return accepted(
            self.mirror.repo, sha, Signers(mode, repo.allowed_signers, repo.evidence_signers), self._signatures
        )

    def _rewind(self, sha: str) -> str | None:
        """A head that does not descend from the last applied commit is a replay until an operator allows it."""
        last = anchor(self.store)
        if last is None or last == sha:
            return None
        repo = self.mirror.repo
        try:
            descends = last in repo and repo.descendant_of(sha, last)
        except (KeyError, ValueError, pygit2.GitError):
            descends = False
        if descends:
            return None
        allowed = allowed_rewind(self.store, sha)
        if allowed is not None:
            log.warning("commit.rewind_allowed", by=allowed.get("by"), reason=allowed.get("reason"), last_applied=last)
            return None
        reason = (
            f"commit {sha[:12]} does not descend from the last applied commit {last[:12]} "
            f"(a force-push rewinds the branch); an operator allows it with "
            f'`lanes allow-rewind {sha} --reason "..."`'
        )
        log.warning("commit.rewind_refused", reason=reason, last_applied=last)
        return reason

    @staticmethod
    def _outcome(result: CycleResult) -> str:
        results = {r.result for r in result.results}
        if results & {"failed", "rolled-back"}:
            return "failed"
        if "denied" in results:
            return "denied"
        if "blocked" in results:
            return "blocked"
        if "preempted" in results:
            return "preempted"
        return "applied"

    @staticmethod
    def _verdict(result: CycleResult) -> dict[str, Any]:
        lanes = []
        for r in result.results:
            if r.result == "noop":
                continue
            entry: dict[str, Any] = {
                "lane": r.lane,
                "result": r.result,
                "error": with_engine_words(r.error, r.logs),  # the engine's own words beside "a rank exited"
                "timings": {k: v for k, v in r.timings.items() if k in ("total", "watch_requests", "watch_failures")},
            }
            if r.held_until is not None:
                entry["held_until"] = instant_text(r.held_until)
            if r.result == "denied":
                rules = sorted({v.rule for v in result.verdict.lane_violations(r.lane) if v.severity == "deny"})
                entry["rule"] = ", ".join(rules)
            lanes.append(entry)
        return {"commit": result.commit, "lanes": lanes}

    async def _record(self, head: str, outcome: str, verdict: dict[str, Any]) -> None:
        verdict = {**verdict, "commit": head, "outcome": outcome}
        self.store.record_commit(head, outcome, verdict)
        try:
            # In a thread, on the mirror's lock: a fetch may be updating the notes refs right now.
            await asyncio.to_thread(self._write_note, head, verdict)
        except (LanesError, OSError, ValueError, pygit2.GitError) as exc:
            log.warning("note.write_failed", error=str(exc))
            return
        asyncio.get_running_loop().run_in_executor(None, self._push_notes)

    def _write_note(self, head: str, verdict: dict[str, Any]) -> None:
        with self.mirror.lock:
            write_verdict_note(self.mirror.repo, head, verdict, signing_key=self.mirror.notes_signing_key)

    def _push_notes(self) -> None:
        try:
            self.mirror.push_notes()
        except LanesError as exc:
            log.warning("note.push_failed", error=str(exc))


def _repeats(recorded: dict[str, Any], verdict: dict[str, Any]) -> bool:
    """A cycle that only finds the same lanes blocked or denied again adds nothing to the commit's record.

    A lane blocked by another reconciler's lease is retried every few seconds; recording each retry would
    fill the commit's note with the same line.
    """
    lanes = verdict.get("lanes") or []
    if any(entry.get("result") not in {"blocked", "denied", "suspended"} for entry in lanes):
        return False
    before = {(e.get("lane"), e.get("result")) for e in recorded["detail"].get("lanes") or []}
    return {(e.get("lane"), e.get("result")) for e in lanes} == before
