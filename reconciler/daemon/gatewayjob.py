"""The daemon's gateway job: make the gateway hold the routes the lanes' states derive, beside the loop.

A pass computes the wanted routes (`reconciler.gateway.routes.desired_routes`) from the journal's lane states
and the last state the daemon decided, then has the router add and remove the difference
(`reconciler.gateway.router.reconcile`). It is kicked whenever a cycle or an operation ends (a lane passed
its gate, failed, stopped), and runs every `interval_s` anyway: a restarted gateway has forgotten its workers.
A pass is a task of its own under `timeout_s`; a kick while one runs makes one more pass after it, never two
at once. Worker addresses are where the daemon reaches the hosts (`[hosts.<name>]` overrides applied): the
gateway runs on this control node, beside the daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import structlog

from reconciler.daemon.configgateway import GatewaySettings
from reconciler.execute.cycle import HostOverride
from reconciler.gateway.control import WorkerFigures, read_figures
from reconciler.gateway.hold import HoldServer
from reconciler.gateway.launch import read_key
from reconciler.gateway.router import RouteChanges, RouterError, reconcile
from reconciler.gateway.routes import away_models, desired_routes
from reconciler.gateway.smg import SmgRouter
from reconciler.spec.fleet import Host
from reconciler.spec.load import DesiredState
from reconciler.store.journal import Store
from reconciler.store.lanestate import lane_states, last_starts

log = structlog.get_logger("lanes.gateway")
DRAIN_PASSES = 30
"""Passes a second apart while a wanted URL is still draining; after that, the interval's pass takes it."""


class GatewayJob:
    def __init__(
        self,
        settings: GatewaySettings,
        store: Store,
        desired: Callable[[], DesiredState | None],
        overrides: Mapping[str, HostOverride],
    ) -> None:
        self.settings = settings
        self.store = store
        self._desired = desired
        self.overrides = overrides
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._draining = 0
        """Passes in a row that found a wanted worker still draining (each is followed by another, up to a bound)."""
        self.last: dict[str, Any] = {}
        """The last pass: when, the routes it made the gateway hold (model -> URLs), what changed, its error."""
        self.hold = HoldServer(settings.hold_host, settings.hold_port)
        """The holding answer (503 with Retry-After) for models whose only lane changes in place."""
        self._passes_done = 0
        self._pass_ended = asyncio.Condition()

    async def start(self) -> None:
        """Open the holding answer's listener (the routes passes start with the first kick)."""
        if self.settings.enabled:
            await self.hold.start()

    async def settle(self) -> None:
        """A pass over the routes the lanes' states derive now, awaited (a rollout's drain and watch wait for it);
        bounded by the pass's own timeout, and a pass that fails is said, never raised."""
        if not self.settings.enabled:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.settings.timeout_s * 2):
                while True:
                    # A running pass may have read the older states: the one after it is the one that counts.
                    await self._one_more_pass(self._passes_done + (2 if self.running else 1))
                    if not self.last.get("waiting") and not self.last.get("error"):
                        return  # the gateway holds what the states derive
                    await asyncio.sleep(0.5)  # a worker still draining, or the gateway did not answer: again

    async def _one_more_pass(self, target: int) -> None:
        """Kick, and wait until `target` passes have ended since the daemon started."""
        self.kick()
        async with self._pass_ended:
            await self._pass_ended.wait_for(lambda: self._passes_done >= target)

    async def figures(self, url: str) -> WorkerFigures | None:
        """One worker's figures from the gateway's Prometheus listener, on the control plane's host."""
        desired = self._desired()
        if desired is None or desired.fleet.gateway is None or not self.settings.enabled:
            return None
        host = urlsplit(self.settings.url).hostname or "127.0.0.1"
        shown = f"[{host}]" if ":" in host else host
        port = self.settings.metrics_port or desired.fleet.gateway.metrics_port
        return await read_figures(f"http://{shown}:{port}/metrics", url)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def kick(self) -> None:
        """A pass soon: now if none runs, else once the running one ends."""
        if not self.settings.enabled:
            return
        self._again = True
        if not self.running:
            self._task = asyncio.create_task(self._passes(), name="lanes-gateway")

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.hold.close()

    async def _passes(self) -> None:
        while self._again:
            self._again = False
            try:
                async with asyncio.timeout(self.settings.timeout_s):
                    await self.once()
            except TimeoutError:
                self._failed(f"the pass took longer than {self.settings.timeout_s:.0f} s")
            except Exception as exc:  # a broken pass costs that pass, never the daemon
                log.error("gateway.crashed", error=f"{type(exc).__name__}: {exc}", exc_info=True)
                self._failed(f"{type(exc).__name__}: {exc}")
            finally:
                self._passes_done += 1
                async with self._pass_ended:
                    self._pass_ended.notify_all()

    async def once(self) -> RouteChanges | None:
        """One pass; None when there is nothing to route yet (no decided state, no `gateway:` in it)."""
        desired = self._desired()
        if desired is None or desired.fleet.gateway is None:
            return None
        states = lane_states(self.store)
        routes = desired_routes(desired.fleet, self._reached(desired.hosts), states)
        # A model whose only lanes change in place answers 503 with Retry-After meanwhile (reconciler.gateway.hold).
        away = away_models(desired.fleet, states, last_starts(self.store), time.time()) if self.hold.port else {}
        self.hold.set_away(away)
        holding = frozenset(self.hold.url(model) for model in away)
        for model in away:
            routes[model] = frozenset({self.hold.url(model)})
        assert self.settings.key_file is not None  # the settings refuse enabled without one
        try:
            key = read_key(str(self.settings.key_file))  # read at each pass: a rotated key is used at once
        except ValueError as exc:
            self._failed(f"gateway.key_file {exc}")
            return None
        router = SmgRouter(self.settings.url, key)
        try:
            changes = await reconcile(router, routes, holding)
        except RouterError as exc:
            self._failed(str(exc))
            return None
        finally:
            await router.aclose()
        if changes.changed or changes.waiting:
            log.info(
                "gateway.routes",
                added=[f"{model} {url}" for url, model in changes.added],
                removed=[f"{model} {url}" for url, model in changes.removed],
                waiting=list(changes.waiting),
            )
        self.last = {
            "at": time.time(),
            "routes": {model: sorted(urls) for model, urls in sorted(routes.items())},
            "away": {model: round(back - time.time(), 1) for model, back in sorted(away.items())},
            "added": len(changes.added),
            "removed": len(changes.removed),
            "waiting": list(changes.waiting),
            "error": None,
        }
        self._draining = self._draining + 1 if changes.waiting else 0
        if changes.waiting and self._draining <= DRAIN_PASSES:
            self._again = True  # a worker still draining (SMG lets go after about 5 s): registered on a next pass
            await asyncio.sleep(1.0)
        return changes

    def _reached(self, hosts: Mapping[str, Host]) -> dict[str, Host]:
        """The state's hosts at the addresses the daemon reaches them on (an override: a tunnel, a simulated Spark)."""
        out = dict(hosts)
        for name, override in self.overrides.items():
            if name in out:
                out[name] = out[name].model_copy(update={"address": override.address})
        return out

    def _failed(self, error: str) -> None:
        log.warning("gateway.failed", url=self.settings.url, error=error)
        self.last = {**self.last, "at": time.time(), "error": error}
