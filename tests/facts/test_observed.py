"""The observed-state values: label accessors, leases and fleet helpers."""

from __future__ import annotations

import pytest

from reconciler.facts.observed import Lease, ObservedContainer, ObservedFleet, ObservedHost

pytestmark = pytest.mark.timeout(60)


def _c(name: str, lane: str, rank: str, state: str = "running") -> ObservedContainer:
    labels = {"lanes.managed": "true", "lanes.lane": lane, "lanes.rank": rank, "lanes.spec": "s" + rank}
    return ObservedContainer(name, "id-" + name, "img", "sha256:x", state, 0, labels)


def _host(name: str, *containers: ObservedContainer) -> ObservedHost:
    return ObservedHost(
        host=name,
        reachable=True,
        error=None,
        containers=containers,
        unmanaged=(),
        listening=frozenset({8000}),
        memory=None,
        disk_free=None,
        disk_total=None,
        models={},
        lease=None,
        probe_errors=(),
    )


def test_container_labels() -> None:
    c = _c("a", "lane1", "1", state="exited")
    assert (c.managed, c.lane, c.rank, c.spec_hash, c.commit, c.running) == (
        True,
        "lane1",
        1,
        "s1",
        None,
        False,
    )
    odd = ObservedContainer("b", "id", "img", "sha", "running", None, {"lanes.rank": "head"})
    assert (odd.managed, odd.rank, odd.running) == (False, None, True)


def test_lease_held_by_other() -> None:
    lease = Lease(owner="alice", acquired=100.0, expires=200.0)
    assert lease.held_by_other("bob", now=150.0)
    assert not lease.held_by_other("alice", now=150.0)
    assert not lease.held_by_other("bob", now=200.0)


def test_unreachable_host() -> None:
    h = ObservedHost.unreachable("spark4", "timed out after 10 s")
    assert (h.reachable, h.error, h.containers, h.memory, h.lease) == (
        False,
        "timed out after 10 s",
        (),
        None,
        None,
    )


def test_fleet_helpers() -> None:
    fleet = ObservedFleet(
        {
            "spark2": _host("spark2", _c("l-r1", "lane1", "1")),
            "spark1": _host("spark1", _c("l-r0", "lane1", "0"), _c("m-r0", "lane2", "0")),
            "spark3": ObservedHost.unreachable("spark3", "refused"),
        }
    )
    assert [(h, c.name) for h, c in fleet.containers_of_lane("lane1")] == [
        ("spark1", "l-r0"),
        ("spark2", "l-r1"),
    ]
    assert fleet.lanes() == {"lane1", "lane2"}
    assert fleet.unreachable() == ("spark3",)
    spark1 = fleet.host("spark1")
    assert spark1 is not None
    assert spark1.container("m-r0") is not None
    assert [c.name for c in spark1.lane_containers("lane1")] == ["l-r0"]
    assert len(list(fleet)) == 3
