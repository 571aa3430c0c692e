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
from typing import Any, Literal

import pygit2
import structlog

from reconciler.daemon.config import DaemonConfig
from reconciler.daemon.evidencejob import benchmark_changed
from reconciler.daemon.gate import UnverifiedCommitError
from reconciler.daemon.metrics import Metrics
from reconciler.errors import InputError, LanesError
from reconciler.execute.apply import ProgressEvent
from reconciler.execute.cycle import CycleResult, CycleRunner
from reconciler.execute.results import Result
from reconciler.notifications import hub as notifications
from reconciler.notifications.events import Refusal
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
        self, config: DaemonConfig, store: Store, runner: CycleRunner, mirror: Mirror, metrics: Metrics
    ) -> None:
        self.config = config
        self.store = store
        self.runner = runner
        self.mirror = mirror
        self.metrics = metrics
        self.last_desired: DesiredState | None = None
        self.last_result: CycleResult | None = None
        """The last cycle's verdict, probe and plan: the dashboard shows its budgets and host facts."""
        self.blocked: dict[str, str] = {}
        """Lanes the last cycle could not act on, and why (a host leased by another reconciler, unreachable)."""
        self._loaded: tuple[tuple[str, str, str], LoadedCommit] | None = None
        self._trusted: str | None = None
        self.refused: dict[str, str] | None = None
        """The head refused last ({"commit", "reason"}), None once a head is applied; /status shows it."""
        self._signatures: dict[tuple[str, ...], tuple[bool, str | None, str]] = {}

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

    async def decide(self, head: str) -> str:
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
            self.last_desired = loaded.desired
            self._trusted = head
            if anchor(self.store) != head:
                set_anchor(self.store, head)
            result = await self.runner.run_cycle(loaded, progress=log_progress)
            self.last_result = result
            outcome = self._outcome(result)
            notifications.on_cycle(result, loaded.desired)
            self.metrics.record_cycle(time.monotonic() - t0, result.results)
            # Only what another reconciler or a host holds up is looked at again soon; a condemned spec
            # waits for a change, and a spec in backoff for its own time (the service schedules both).
            self.blocked = {
                r.lane: r.error or "blocked"
                for r in result.results
                if r.result == Result.BLOCKED and r.cause in {Cause.LEASE_HELD, Cause.UNREACHABLE}
            }
            for lane, why in sorted(self.blocked.items()):
                log.info("lane.blocked", lane=lane, reason=why)
            self.metrics.blocked.set(len(self.blocked))
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
        finally:
            structlog.contextvars.unbind_contextvars("commit")

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
                "error": r.error,
                "timings": {k: v for k, v in r.timings.items() if k == "total"},
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
            write_verdict_note(self.mirror.repo, head, verdict)

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
