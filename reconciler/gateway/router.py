"""What lanes needs of a router, and the step that makes a router hold the derived routes.

The router is anything that registers workers per served model name and lists them back (`Router`); SMG's
adapter is `reconciler.gateway.smg`. `reconcile` is idempotent: it lists what the router holds and adds or
removes only the difference, so the same call after a gateway restart (which forgets every worker) puts
every route back, and the same call twice in a row changes nothing the second time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from reconciler.gateway.routes import Routes


@dataclass(frozen=True)
class Worker:
    """One worker as the router lists it."""

    id: str
    url: str
    model: str | None
    """The served model name it is registered for (None: the router accepts any model there)."""
    status: str
    """The router's own word: SMG says pending, ready, not_ready, failed or draining."""

    @property
    def leaving(self) -> bool:
        """On its way out (draining in SMG): no longer a route, and not to be removed again."""
        return self.status == "draining"


class Router(Protocol):
    """A gateway's worker registry, as lanes drives it."""

    async def list_workers(self) -> list[Worker]: ...

    async def add_worker(self, url: str, model: str) -> None: ...

    async def remove_worker(self, worker: Worker) -> None: ...


class RouterError(Exception):
    """The router refused a call or answered something unreadable (said for people, never with its key)."""


@dataclass(frozen=True)
class RouteChanges:
    """What one reconcile did: workers added and removed (url, model), and URLs left for the next pass."""

    added: tuple[tuple[str, str], ...] = ()
    removed: tuple[tuple[str, str | None], ...] = ()
    waiting: tuple[str, ...] = field(default=())
    """Wanted URLs still registered as leaving (draining): added on a later pass, once the router lets go."""

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed)


async def reconcile(router: Router, routes: Routes) -> RouteChanges:
    """Make `router` hold exactly `routes`: remove what is not wanted, then add what is missing.

    The router's routes are derived state: a worker of a model lanes does not route, or of a URL no lane
    serves at its wanted spec, is removed whoever added it. Removals go first, so a URL that moved from one
    model to another is let go before it is registered again (SMG refuses a URL it already holds).
    """
    wanted: Mapping[str, frozenset[str]] = routes
    held = await router.list_workers()
    removed: list[tuple[str, str | None]] = []
    present: set[tuple[str, str]] = set()
    leaving: set[str] = set()
    for worker in held:
        if worker.leaving:
            leaving.add(worker.url)
            continue
        if worker.model is not None and worker.url in wanted.get(worker.model, frozenset()):
            present.add((worker.url, worker.model))
            continue
        await router.remove_worker(worker)
        removed.append((worker.url, worker.model))
        leaving.add(worker.url)
    added: list[tuple[str, str]] = []
    waiting: list[str] = []
    for model in sorted(wanted):
        for url in sorted(wanted[model]):
            if (url, model) in present:
                continue
            if url in leaving:
                waiting.append(url)
                continue
            await router.add_worker(url, model)
            added.append((url, model))
    return RouteChanges(added=tuple(added), removed=tuple(removed), waiting=tuple(waiting))
