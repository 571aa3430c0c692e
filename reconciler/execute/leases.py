"""Host leases inside a lane transaction: take them all or none, keep them alive, give them back.

Two reconcilers pointed at one fleet (two control nodes, or a daemon and a
person's `lanes apply`) must never change one Spark at once. Each takes the
lease of every host a lane touches before it changes anything; the lease is a
file on the host with an owner and an expiry (`reconciler.facts.lease_script`).

- One host at a time, in name order: two reconcilers that want the same hosts
  meet at the first one, so one gets them all and the other none. Grabbing
  them in parallel could split them, each holding half and neither acting.
- A lease held by someone else is not a failure of the lane: the transaction
  stops before touching anything, gives back what it took, and reports the
  lane *blocked* with the holder's name; the daemon tries again later.
- A lease is renewed while the transaction runs (a model can load for longer
  than the lease lasts), so it never expires under a reconciler still acting.
"""

from __future__ import annotations

import asyncio
import contextlib

from reconciler.errors import LanesError, StepFailedError
from reconciler.execute.hostops import HostOps, LeaseHeldError
from reconciler.execute.results import ProgressEvent, ProgressFn


class LeaseBlockedError(StepFailedError):
    """Another reconciler holds one of the lane's hosts: nothing was touched, try again later."""

    def __init__(self, held: LeaseHeldError) -> None:
        super().__init__("lease", str(held), touched=False, transient=True, delay_s=held.delay_s)
        self.holder = held.holder
        self.host = held.host


class Leases:
    """The leases this executor holds, and the tasks that renew them, across its concurrent lanes."""

    def __init__(self, ops: HostOps, lease_file: str, owner: str, ttl_s: int, progress: ProgressFn) -> None:
        self.ops = ops
        self.lease_file = lease_file
        self.owner = owner
        self.ttl_s = ttl_s
        self.progress = progress
        self._renewals: dict[str, asyncio.Task[None]] = {}

    async def take(self, hosts: tuple[str, ...], held: list[str], lane: str) -> None:
        """Take every host's lease in name order, appending each to `held` as it is taken."""
        for host in sorted(hosts):
            try:
                await self.ops.acquire_lease(host, self.lease_file, self.owner, self.ttl_s)
            except LeaseHeldError as exc:
                raise LeaseBlockedError(exc) from exc
            except LanesError as exc:
                raise StepFailedError.wrap("lease", [exc], touched=False) from exc
            held.append(host)
            self._keep_alive(host, lane)

    async def give_back(self, hosts: list[str]) -> None:
        await self.stop_renewals(hosts)
        await asyncio.gather(*(self.ops.release_lease(h, self.lease_file, self.owner) for h in hosts))

    def _keep_alive(self, host: str, lane: str) -> None:
        old = self._renewals.pop(host, None)
        if old is not None:
            old.cancel()
        self._renewals[host] = asyncio.create_task(self._renew(host, lane))

    async def _renew(self, host: str, lane: str) -> None:
        interval = max(1.0, self.ttl_s / 3)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.ops.acquire_lease(host, self.lease_file, self.owner, self.ttl_s)
            except LeaseHeldError as exc:
                # Only if this reconciler stalled past the expiry: say so, the transaction's own steps decide.
                self.progress(ProgressEvent(lane, "lease", "failed", f"lease on {host} lost: {exc}"))
                return
            except LanesError:
                continue  # an unreachable host: the lease still runs; try again at the next interval

    async def stop_renewals(self, hosts: list[str] | None = None) -> None:
        names = list(self._renewals) if hosts is None else [h for h in hosts if h in self._renewals]
        tasks = [self._renewals.pop(h) for h in names]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
