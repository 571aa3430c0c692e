"""Route derivation (pure) and the reconcile step over a fake router."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconciler.gateway.router import RouteChanges, Worker, reconcile
from reconciler.gateway.routes import away_models, desired_routes, routable, worker_url
from reconciler.lane import Condemned, Gate, LaneHealth, LaneState, Phase, Serving, Transaction, TxKind, Wanted
from reconciler.spec.fleet import FleetDefaults, Host
from reconciler.spec.gateway import Gateway

pytestmark = pytest.mark.timeout(10)

HOSTS = {
    "dgx1": Host(name="dgx1", address="10.0.0.1"),
    "dgx2": Host(name="dgx2", address="10.0.0.2"),
    "dgx5": Host(name="dgx5", address="fd00::5"),
}
FLEET = FleetDefaults(gateway=Gateway(models={"qwen": ("qwen-a", "qwen-b"), "glm": ("glm",)}))


def healthy(host: str, port: int = 8000, served: str = "qwen", fp: str = "f1") -> LaneState:
    return LaneState(
        health=LaneHealth.HEALTHY,
        wanted=Wanted(desired="running", commit="c1", hosts=(host,)),
        serving=fp,
        healthy=Serving(fingerprint=fp, gate=Gate(host=host, port=port, served_model=served), commit="c1"),
    )


def test_healthy_lanes_at_their_wanted_spec_are_routes_at_their_gate() -> None:
    states = {"qwen-a": healthy("dgx1"), "qwen-b": healthy("dgx5", 8001), "glm": healthy("dgx2", served="glm")}
    assert desired_routes(FLEET, HOSTS, states) == {
        "qwen": frozenset({"http://10.0.0.1:8000", "http://[fd00::5]:8001"}),
        "glm": frozenset({"http://10.0.0.2:8000"}),
    }


@pytest.mark.parametrize(
    "state",
    [
        LaneState(),  # no record yet
        replace(healthy("dgx1"), health=LaneHealth.DEGRADED),
        replace(healthy("dgx1"), health=LaneHealth.PROGRESSING),
        replace(healthy("dgx1"), wanted=Wanted(desired="stopped")),
        replace(healthy("dgx1"), serving="f2"),  # serves a spec never gated
        replace(healthy("dgx1"), serving=None),
        replace(healthy("dgx1"), transaction=Transaction(TxKind.DEPLOY, "f2", "c2", Phase.STOPPING, 0.0)),
    ],
    ids=["no-record", "degraded", "progressing", "stopped", "other-spec", "not-serving", "tx-touching"],
)
def test_a_lane_not_healthy_at_its_wanted_spec_is_no_route(state: LaneState) -> None:
    assert not routable(state)
    assert desired_routes(FLEET, HOSTS, {"qwen-a": state})["qwen"] == frozenset()


def test_a_transaction_still_preparing_keeps_the_route() -> None:
    tx = Transaction(TxKind.DEPLOY, "f2", "c2", Phase.PREPARING, 0.0)
    state = replace(healthy("dgx1"), transaction=tx)
    assert routable(state)


def test_a_gate_of_another_name_or_an_unknown_host_is_no_route() -> None:
    states = {"qwen-a": healthy("dgx1", served="other"), "qwen-b": healthy("gone")}
    assert desired_routes(FLEET, HOSTS, states)["qwen"] == frozenset()


def test_no_gateway_no_routes_and_models_without_lanes_are_listed_empty() -> None:
    assert desired_routes(FleetDefaults(), HOSTS, {"qwen-a": healthy("dgx1")}) == {}
    assert desired_routes(FLEET, HOSTS, {}) == {"qwen": frozenset(), "glm": frozenset()}


def test_worker_url_brackets_ipv6() -> None:
    assert worker_url("10.0.0.1", 80) == "http://10.0.0.1:80"
    assert worker_url("::1", 80) == "http://[::1]:80"


class FakeRouter:
    """Holds workers as SMG does: a removed worker drains (lists as draining) until `settle()`."""

    def __init__(self) -> None:
        self.workers: dict[str, Worker] = {}
        self.calls: list[str] = []
        self._n = 0

    async def list_workers(self) -> list[Worker]:
        return list(self.workers.values())

    async def add_worker(self, url: str, model: str, *, holding: bool = False) -> None:
        assert all(w.url != url for w in self.workers.values()), "SMG refuses a URL it holds (409)"
        self._n += 1
        ident = f"00000000-0000-0000-0000-{self._n:012d}"
        self.workers[ident] = Worker(id=ident, url=url, model=model, status="ready")
        self.calls.append(f"add {url} {model}")

    async def remove_worker(self, worker: Worker) -> None:
        self.workers[worker.id] = Worker(id=worker.id, url=worker.url, model=worker.model, status="draining")
        self.calls.append(f"remove {worker.url}")

    def settle(self) -> None:
        self.workers = {k: w for k, w in self.workers.items() if not w.leaving}


async def test_reconcile_adds_removes_and_is_idempotent() -> None:
    router = FakeRouter()
    routes = {"qwen": frozenset({"http://a:1", "http://b:1"}), "glm": frozenset()}
    first = await reconcile(router, routes)
    assert sorted(first.added) == [("http://a:1", "qwen"), ("http://b:1", "qwen")]
    assert await reconcile(router, routes) == RouteChanges()  # nothing to do the second time
    shrunk = {"qwen": frozenset({"http://b:1"}), "glm": frozenset()}
    assert (await reconcile(router, shrunk)).removed == (("http://a:1", "qwen"),)
    assert not (await reconcile(router, shrunk)).changed  # a draining worker is not removed again
    router.settle()
    assert [w.url for w in await router.list_workers()] == ["http://b:1"]


async def test_reconcile_removes_what_no_route_names_and_waits_for_a_moved_url() -> None:
    router = FakeRouter()
    await router.add_worker("http://x:1", "stray")  # added by hand: the gateway's routes are derived
    await router.add_worker("http://m:1", "qwen")
    routes = {"glm": frozenset({"http://m:1"})}  # the URL now serves another model
    changes = await reconcile(router, routes)
    assert sorted(changes.removed) == [("http://m:1", "qwen"), ("http://x:1", "stray")]
    assert changes.waiting == ("http://m:1",) and changes.added == ()
    router.settle()
    assert (await reconcile(router, routes)).added == (("http://m:1", "glm"),)


async def test_reconcile_after_a_restart_puts_every_route_back() -> None:
    router = FakeRouter()
    routes = {"qwen": frozenset({"http://a:1", "http://b:1"})}
    await reconcile(router, routes)
    router.workers.clear()  # the gateway restarted: it forgot every worker
    assert len((await reconcile(router, routes)).added) == 2


def _tx(phase: Phase, candidate: Gate | None = None, started: float = 100.0) -> Transaction:
    return Transaction(TxKind.DEPLOY, "f2", "c2", phase, started, None, before=LaneHealth.HEALTHY, candidate=candidate)


def test_blue_green_routes_the_old_ranks_beside_and_the_new_head_while_watched() -> None:
    new = Gate("dgx2", 8000, "qwen")
    beside = replace(healthy("dgx1"), health=LaneHealth.PROGRESSING, transaction=_tx(Phase.BESIDE))
    watching = replace(beside, transaction=_tx(Phase.WATCHING, new))
    draining = replace(beside, transaction=_tx(Phase.DRAINING))
    assert desired_routes(FLEET, HOSTS, {"qwen-a": beside})["qwen"] == {"http://10.0.0.1:8000"}
    assert desired_routes(FLEET, HOSTS, {"qwen-a": watching})["qwen"] == {"http://10.0.0.2:8000"}
    assert desired_routes(FLEET, HOSTS, {"qwen-a": draining})["qwen"] == frozenset()


def test_a_failed_change_that_stopped_nothing_keeps_the_old_spec_routed() -> None:
    kept = replace(healthy("dgx1"), health=LaneHealth.DEGRADED, hold=Condemned("f2"))
    assert desired_routes(FLEET, HOSTS, {"qwen-a": kept})["qwen"] == {"http://10.0.0.1:8000"}
    # Degraded for another reason (its engine stopped answering, nothing failed): no route.
    assert not routable(replace(kept, hold=None))
    # The failed spec is the one that serves (a restore that did not happen): no route.
    assert not routable(replace(kept, hold=Condemned("f1")))


def test_a_model_whose_lanes_change_in_place_is_away_until_its_last_measured_start() -> None:
    loading = replace(healthy("dgx1"), health=LaneHealth.PROGRESSING, transaction=_tx(Phase.STARTING, started=100.0))
    other = replace(healthy("dgx5", 8001), health=LaneHealth.STOPPED, wanted=Wanted(desired="stopped"))
    states = {"qwen-a": loading, "qwen-b": other}
    assert away_models(FLEET, states, {"qwen-a": 500.0}, now=200.0) == {"qwen": 600.0}
    assert away_models(FLEET, states, {}, now=200.0) == {"qwen": 260.0}  # never measured: a minute from now
    # Another replica still routes: the model is not away.
    assert away_models(FLEET, {**states, "qwen-b": healthy("dgx5", 8001)}, {}, now=200.0) == {}
    # Nothing in flight brings it back (stopped, failed): not away but gone, as before.
    assert away_models(FLEET, {"qwen-a": replace(loading, transaction=None)}, {}, now=200.0) == {}


class PendingRouter(FakeRouter):
    """A new worker is `pending` for two listings, as SMG's is until its health checks pass."""

    async def list_workers(self) -> list[Worker]:
        for ident, w in list(self.workers.items()):
            if w.status.startswith("pending"):
                left = int(w.status.removeprefix("pending") or 0)
                self.workers[ident] = replace(w, status="ready" if left <= 1 else f"pending{left - 1}")
        self.calls.append("list " + ",".join(f"{w.url}={w.status}" for w in self.workers.values()))
        return list(self.workers.values())

    async def add_worker(self, url: str, model: str, *, holding: bool = False) -> None:
        await super().add_worker(url, model, holding=holding)
        ident = next(i for i, w in self.workers.items() if w.url == url)
        self.workers[ident] = replace(self.workers[ident], status="pending3")


async def test_reconcile_adds_the_new_worker_and_lets_the_old_go_once_it_is_ready() -> None:
    router = PendingRouter()
    await FakeRouter.add_worker(router, "http://old:1", "qwen")
    changes = await reconcile(router, {"qwen": frozenset({"http://new:1"})}, look_s=0)
    assert changes.added == (("http://new:1", "qwen"),) and changes.removed == (("http://old:1", "qwen"),)
    removed_at = router.calls.index("remove http://old:1")
    # The old worker goes only after a listing shows the new one ready: the model is never without a worker.
    assert any("http://new:1=ready" in c for c in router.calls[:removed_at])
    assert router.calls.index("add http://new:1 qwen") < removed_at


async def test_a_model_whose_new_url_still_drains_elsewhere_keeps_its_old_worker_until_it_can_move() -> None:
    # Blue/green onto the Sparks another model's lane just left: its URL is still draining in the gateway.
    router = FakeRouter()
    await router.add_worker("http://old:1", "qwen")
    await router.add_worker("http://new:1", "glm")
    await router.remove_worker(next(w for w in router.workers.values() if w.url == "http://new:1"))
    routes = {"qwen": frozenset({"http://new:1"}), "glm": frozenset()}
    changes = await reconcile(router, routes)
    assert changes.waiting == ("http://new:1",) and changes.removed == ()  # qwen keeps http://old:1 meanwhile
    router.settle()
    again = await reconcile(router, routes)
    assert again.added == (("http://new:1", "qwen"),) and again.removed == (("http://old:1", "qwen"),)
