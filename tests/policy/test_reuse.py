"""The daemon's evaluation across cycles (`policy.reuse`): a lane's rendered ranks and budget are given again
while the loaded commit and the facts they read are the same, computed again when either changes, and the
verdict is the one a fresh evaluation gives (issue 27: a no-op resync does not render 250 lanes again)."""

from __future__ import annotations

import dataclasses

import pytest

from reconciler.facts.container import ContainerSpec
from reconciler.facts.hostinfo import HostInfo, RdmaDevice
from reconciler.policy import evaluate
from reconciler.policy.hostmem import HostMemory
from reconciler.policy.reuse import Reuse
from reconciler.spec.load import DesiredState, PolicySet

from .builders import GIB, repo_policies, repo_state

pytestmark = pytest.mark.timeout(60)

PRODUCTION = "dsv41-flash-1017-4x-sglang"
"""The example lane whose ranks take their host's RoCE v2 GID index from the probe (`host_env`)."""


@pytest.fixture(scope="module")
def desired() -> DesiredState:
    return repo_state("a" * 40)


@pytest.fixture(scope="module")
def policies() -> PolicySet:
    return repo_policies()


def probed(desired: DesiredState, gid: dict[str, int]) -> dict[str, HostInfo]:
    """Each host's RoCE devices as a probe reads them, its fabric address on GID `gid[host]` (default 3)."""
    return {
        name: HostInfo(
            rdma=tuple(
                RdmaDevice(p.hca, (p.interface,), "4: ACTIVE", {p.ip: gid.get(name, 3)})
                for p in host.data_plane
                if p.hca is not None
            )
        )
        for name, host in desired.hosts.items()
    }


def gid_of(ranks: tuple[tuple[str, ContainerSpec], ...], host: str) -> str:
    return dict(ranks)[host].env_map["NCCL_IB_GID_INDEX"]


def test_the_same_commit_and_facts_give_the_same_verdict_without_rendering_again(
    desired: DesiredState, policies: PolicySet
) -> None:
    reuse, info = Reuse(), probed(desired, {})
    first = evaluate(desired, policies, host_info=info, reuse=reuse)
    assert reuse.hits == 0
    second = evaluate(desired, policies, host_info=info, reuse=reuse)
    renderable = len(first.rendered)
    assert renderable > 1
    assert reuse.hits >= 2 * renderable  # every lane's ranks and budget given again
    assert second == first == evaluate(desired, policies, host_info=info)
    assert second.rendered[PRODUCTION] is first.rendered[PRODUCTION]


def test_a_changed_rdma_fact_renders_that_lane_again(desired: DesiredState, policies: PolicySet) -> None:
    reuse = Reuse()
    host = desired.lanes[PRODUCTION].hosts[1]
    before = evaluate(desired, policies, host_info=probed(desired, {}), reuse=reuse)
    assert gid_of(before.rendered[PRODUCTION], host) == "3"
    hits = reuse.hits
    after = evaluate(desired, policies, host_info=probed(desired, {host: 4}), reuse=reuse)
    assert gid_of(after.rendered[PRODUCTION], host) == "4"
    assert after == evaluate(desired, policies, host_info=probed(desired, {host: 4}))
    # The other lanes' hosts did not change: theirs were given again.
    assert reuse.hits > hits


def test_another_commit_computes_everything_again(desired: DesiredState, policies: PolicySet) -> None:
    reuse, info = Reuse(), probed(desired, {})
    first = evaluate(desired, policies, host_info=info, reuse=reuse)
    lane = desired.lanes[PRODUCTION]
    changed = dataclasses.replace(
        desired, commit="b" * 40, lanes={**desired.lanes, PRODUCTION: lane.model_copy(update={"max_num_seqs": 8})}
    )
    hits = reuse.hits
    verdict = evaluate(changed, policies, host_info=info, reuse=reuse)
    assert reuse.hits == hits
    assert verdict == evaluate(changed, policies, host_info=info)
    head, was = (dict(v.rendered[PRODUCTION])[lane.hosts[0]] for v in (verdict, first))
    assert head.spec_hash != was.spec_hash
    assert "--max-running-requests 8" in " ".join(head.command)


def test_a_changed_free_memory_at_boot_sizes_that_lane_again(desired: DesiredState, policies: PolicySet) -> None:
    reuse = Reuse()
    host = desired.lanes[PRODUCTION].hosts[0]

    def memory(available_gib: int) -> dict[str, HostMemory]:
        return {host: HostMemory(host=host, available=available_gib * GIB, observed_at=1_000.0)}

    before = evaluate(desired, policies, host_memory=memory(100), reuse=reuse)
    after = evaluate(desired, policies, host_memory=memory(90), reuse=reuse)
    assert after == evaluate(desired, policies, host_memory=memory(90))
    ranks = {(b.lane, b.host): b for b in before.budgets}
    again = {(b.lane, b.host): b for b in after.budgets}
    assert ranks[(PRODUCTION, host)].boot_free == 100 * GIB
    assert again[(PRODUCTION, host)].boot_free == 90 * GIB
