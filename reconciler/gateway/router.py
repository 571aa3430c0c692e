"""What lanes needs of a router, and the step that makes a router hold the derived routes.

The router is anything that registers workers per served model name and lists them back (`Router`); SMG's
adapter is `reconciler.gateway.smg`. `reconcile` is idempotent: it lists what the router holds and adds or
removes only the difference, so the same call after a gateway restart (which forgets every worker) puts
every route back, and the same call twice in a row changes nothing the second time.
"""

from __future__ import annotations

import asyncio
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

    async def add_worker(self, url: str, model: str, *, holding: bool = False) -> None:
        """Register `url` for `model`; `holding`: lanes' own holding answer (no retries, no breaker)."""
        ...

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


async def reconcile(
    router: Router,
    routes: Routes,
    holding: frozenset[str] = frozenset(),
    *,
    ready_timeout_s: float = 20.0,
    look_s: float = 0.2,
) -> RouteChanges:
    """Make `router` hold exactly `routes`: add what is missing, let it become ready, then remove the rest.

    The router's routes are derived state: a worker of a model lanes does not route, or of a URL no lane
    serves at its wanted spec, is removed whoever added it. A model's new worker is added before its old one
    is removed, and the old one goes only once the new one is ready (or `ready_timeout_s` passed): a route
    that moves (blue/green's promotion, a model going to its holding answer) never leaves the model with no
    ready worker, which SMG would answer 404. A URL registered for another model is let go first (SMG refuses
    a URL it already holds) and added on a later pass. `holding`: URLs of lanes' holding answer.
    """
    wanted: Mapping[str, frozenset[str]] = routes
    held = await router.list_workers()
    present: set[tuple[str, str]] = set()
    leaving: set[str] = set()
    unwanted: list[Worker] = []
    for worker in held:
        if worker.leaving:
            leaving.add(worker.url)
        elif worker.model is not None and worker.url in wanted.get(worker.model, frozenset()):
            present.add((worker.url, worker.model))
        else:
            unwanted.append(worker)
    moving = {w.url for w in unwanted}  # held for another model (or for none): let go before added again
    added: list[tuple[str, str]] = []
    waiting: list[str] = []
    for model in sorted(wanted):
        for url in sorted(wanted[model]):
            if (url, model) in present:
                continue
            if url in leaving or url in moving:
                waiting.append(url)
                continue
            await router.add_worker(url, model, holding=url in holding)
            added.append((url, model))
    if added and unwanted:
        await _until_ready(router, {url for url, _ in added}, ready_timeout_s, look_s)
    # A model whose new worker must wait (its URL still held for another model, or draining) keeps the
    # workers it has until a later pass can register it; only a URL another model wants is let go now.
    blocked = {model for model, urls in wanted.items() if urls & set(waiting)}
    wanted_urls = {url for urls in wanted.values() for url in urls}
    removed: list[tuple[str, str | None]] = []
    for worker in unwanted:
        if worker.model in blocked and worker.url not in wanted_urls:
            continue
        await router.remove_worker(worker)
        removed.append((worker.url, worker.model))
    return RouteChanges(added=tuple(added), removed=tuple(removed), waiting=tuple(waiting))


async def _until_ready(router: Router, urls: set[str], timeout_s: float, look_s: float) -> None:
    """Wait until the router lists every one of `urls` as ready (its own health check passed), bounded."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        ready = {w.url for w in await router.list_workers() if w.status == "ready"}
        if urls <= ready:
            return
        await asyncio.sleep(look_s)
