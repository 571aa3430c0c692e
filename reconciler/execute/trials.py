"""Trials on spare hosts beside the daemon's lane operations: the hosts each holds, and ending one.

A trial (a proposed engine release, a person's trial branch) runs a lane of its own, `<lane>-trial`, on
spare hosts for as long as a model loads and a benchmark runs: tens of minutes on a Spark. No cycle
waits for it. What keeps the two apart instead:

- Its lanes are in flight (`Operations.busy`): a cycle leaves them alone, so a trial lane, which no
  commit names, is never stopped as a lane removed from the state.
- Its hosts are held: a lane of a commit that acts on one of them waits (`split_plan`'s `held`), and
  the trial is ended at once, since the newest commit wins. Its own cleanup stops its ranks; once it
  lets go of the hosts the daemon plans again, and the waiting lane starts.
- No trial starts on a host the last plan has a lane on (it is not spare then) or a lane operation is
  changing, and two trials never hold one host nor run one lane name: the later waits for the earlier.
- Its transactions take the lane operations' host locks (`InFlight.host_locks`), and one in its
  readiness gate is ended at that safe point, as a newer commit ends a lane's (`InFlight.preempt`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from reconciler.cancel import cancel_requested, raise_if_cancel_requested
from reconciler.errors import TransientError
from reconciler.execute.inflight import InFlight
from reconciler.plan.operations import ACTING, touched_hosts
from reconciler.plan.steps import Plan

log = structlog.get_logger("lanes.trial")
T = TypeVar("T")


class TrialDisplacedError(TransientError):
    """A lane of the newest commit uses a host the trial wants: the trial is not started, or is ended."""


@dataclass
class Trial:
    lanes: tuple[str, ...]
    hosts: tuple[str, ...]
    task: asyncio.Task[Any] | None = None
    """Its attempt (`Trials.run`): what a commit cancels."""
    ended: str | None = None
    """Why a commit ended its attempt (set once)."""
    wanted: bool = False
    """A commit's lane waits for its hosts: the daemon plans again once they are let go."""


class Trials:
    def __init__(self, inflight: InFlight, on_end: Callable[[bool], None]) -> None:
        self.inflight = inflight
        self.on_end = on_end
        """Told when a trial let go of its hosts; True when a commit ended it (its lanes wait to be planned)."""
        self._running: list[Trial] = []
        self._changed = asyncio.Event()
        self.used: dict[str, str] = {}
        """host -> a lane of the last plan on it: no trial starts there."""

    def lanes(self) -> frozenset[str]:
        return frozenset(lane for t in self._running for lane in t.lanes)

    def snapshot(self) -> list[dict[str, Any]]:
        """The trials holding hosts now, as `/status` lists them beside the lane operations."""
        return [{"lanes": list(t.lanes), "hosts": list(t.hosts), "ended": t.ended} for t in self._running]

    def hosts(self) -> frozenset[str]:
        """Hosts trials hold, ended ones included until their cleanup stopped their ranks."""
        return frozenset(h for t in self._running for h in t.hosts)

    def claim(self, plan: Plan, commit: str, *, full: bool) -> frozenset[str]:
        """The hosts `plan` (at `commit`) has lanes on are no trial's to take; a trial on a host a lane of it
        acts on is ended. The hosts trials still hold: lanes acting on them wait. `full`: the plan covers
        every lane (a lane-scoped plan adds to what the last full one said)."""
        mine = self.lanes()
        lanes = [lp for lp in plan.lanes if lp.lane not in mine]
        # Where each lane runs or is to run; where a lane is stopped, the operation stopping it says (`changing`).
        uses = {h: lp.lane for lp in lanes if lp.action != "stop" for h in lp.hosts}
        self.used = uses if full else {**self.used, **uses}
        acting = {h: lp.lane for lp in lanes if lp.action in ACTING for h in touched_hosts(lp)}
        for trial in self._running:
            wanted = [h for h in trial.hosts if h in acting]  # in its own order
            if wanted:
                self._end(trial, f"commit {commit[:12]} needs host {wanted[0]} (lane {acting[wanted[0]]})", commit)
        return self.hosts()

    async def run(
        self,
        lanes: tuple[str, ...],
        hosts: tuple[str, ...],
        changing: Callable[[], Collection[str]],
        attempt: Callable[[], Coroutine[Any, Any, T]],
        cleanup: Callable[[], Coroutine[Any, Any, None]],
    ) -> T:
        """`attempt` (the trial) and then `cleanup` (its lanes stopped, however it ended), holding `hosts` for
        `lanes` until both are done. TrialDisplacedError when a lane of a commit uses one of the hosts before
        it starts (`changing`: the hosts lane operations are changing now), or a commit ends the attempt."""
        while True:
            taken = sorted((h, f"lane {self.used[h]} runs there") for h in hosts if h in self.used)
            taken = taken or [(h, "a lane operation is changing it") for h in sorted(set(hosts) & set(changing()))]
            if taken:
                host, why = taken[0]
                raise TrialDisplacedError(f"not started: host {host} is not spare ({why})")
            if not set(hosts) & self.hosts() and not set(lanes) & self.lanes():
                break
            log.info("trial.waiting", lanes=list(lanes), hosts=sorted(set(hosts) & self.hosts()))
            # Another trial holds one of these hosts, or runs a lane of this name (a proposal's and a trial
            # branch's candidate of one lane are both `<lane>-trial`): this one follows it.
            await self._changed.wait()
        trial = Trial(lanes, hosts)
        self._running.append(trial)
        try:
            # Its own task, so that ending it ends the attempt alone: the cleanup below runs uncancelled.
            task: asyncio.Task[T] = asyncio.create_task(attempt(), name=f"trial:{','.join(lanes)}")
            trial.task = task
            try:
                # A shutdown cancels the job awaiting here, which cancels the attempt and waits for it to end.
                await task
            except asyncio.CancelledError:
                if trial.ended is None or cancel_requested():
                    raise
            finally:
                await cleanup()  # in a shutdown too (as a transaction puts back what it started)
            raise_if_cancel_requested()  # a shutdown the attempt swallowed (a library's error): the job ends
        finally:
            self._running.remove(trial)
            self._changed.set()
            self._changed = asyncio.Event()
            self.on_end(trial.wanted)
        if trial.ended is not None:
            # Ended in its readiness gate (the transaction stopped its ranks and returned) or anywhere else.
            raise TrialDisplacedError(f"ended: {trial.ended}")
        return task.result()

    def _end(self, trial: Trial, why: str, commit: str) -> None:
        trial.wanted = True
        if trial.ended is not None or trial.task is None or trial.task.done():
            return  # ending already, or cleaning up: the waiting lane is planned once the hosts are let go
        trial.ended = why
        log.info("trial.ending", lanes=list(trial.lanes), reason=why)
        # In a transaction that can be ended at a safe point (its gate): it stops what it started and returns.
        preempted = [lane for lane in trial.lanes if self.inflight.preempt(lane, commit)]
        if not preempted:
            trial.task.cancel()  # anywhere else (planning, a benchmark): the cleanup stops its ranks
