"""Trials on spare hosts beside the lane operations (`reconciler.execute.trials`), on one event loop: a trial
holds its hosts until its cleanup ran, a second trial on one of them waits, a host a plan's lane runs on is not
spare, and a plan that acts on a trial's host ends the trial at once."""

from __future__ import annotations

import asyncio

import pytest

from reconciler.execute.operations import Operations
from reconciler.execute.trials import TrialDisplacedError
from reconciler.plan.steps import AcquireLeases, LanePlan, Plan

pytestmark = pytest.mark.timeout(10)


def plan(*lanes: tuple[str, str, tuple[str, ...]]) -> Plan:
    return Plan(
        "c0ffee" * 6,
        tuple(
            LanePlan(name, action, "", (AcquireLeases(hosts),) if action != "noop" else (), "f", hosts=hosts)  # type: ignore[arg-type]
            for name, action, hosts in lanes
        ),
    )


class Probe:
    """A trial's attempt that runs until `release`, and a record of what ran."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def attempt(self) -> str:
        self.log.append(f"{self.name} starts")
        self.started.set()
        await self.release.wait()
        return f"{self.name} measured"

    async def cleanup(self) -> None:
        self.log.append(f"{self.name} cleaned up")


async def test_a_trial_is_in_flight_and_a_second_one_on_its_hosts_waits_for_its_cleanup() -> None:
    ended: list[bool] = []
    ops, log = Operations(on_trial_end=ended.append), list[str]()
    first, second = Probe("first", log), Probe("second", log)
    one = asyncio.create_task(ops.trial(("a-trial",), ("s1", "s2"), first.attempt, first.cleanup))
    await first.started.wait()
    assert ops.busy() == {"a-trial"} and ops.trials.hosts() == {"s1", "s2"}
    assert ops.trials.snapshot() == [{"lanes": ["a-trial"], "hosts": ["s1", "s2"], "ended": None}]  # /status
    two = asyncio.create_task(ops.trial(("b-trial",), ("s2", "s3"), second.attempt, second.cleanup))
    await asyncio.sleep(0.05)
    assert log == ["first starts"], "two trials ran on s2 at once"
    first.release.set()
    assert await one == "first measured"
    await second.started.wait()
    second.release.set()
    assert await two == "second measured"
    assert log == ["first starts", "first cleaned up", "second starts", "second cleaned up"]
    assert ended == [False, False] and ops.busy() == frozenset()


async def test_a_host_a_lane_of_the_plan_runs_on_is_not_spare() -> None:
    ops, log = Operations(), list[str]()
    ops.trials.claim(plan(("prod", "noop", ("s1",))), "c" * 40, full=True)
    probe = Probe("t", log)
    with pytest.raises(TrialDisplacedError, match="host s1 is not spare \\(lane prod runs there\\)"):
        await ops.trial(("t-trial",), ("s1",), probe.attempt, probe.cleanup)
    assert log == []  # nothing was started, nothing to clean up
    ops.trials.claim(plan(("prod", "noop", ("h1",))), "d" * 40, full=True)  # the lane moved off it
    probe.release.set()
    assert await ops.trial(("t-trial",), ("s1",), probe.attempt, probe.cleanup) == "t measured"


async def test_a_plan_acting_on_a_trials_host_ends_it_and_its_lanes_wait_for_the_cleanup() -> None:
    ended: list[bool] = []
    ops, log = Operations(on_trial_end=ended.append), list[str]()
    probe = Probe("t", log)
    trial = asyncio.create_task(ops.trial(("t-trial",), ("s1", "s2"), probe.attempt, probe.cleanup))
    await probe.started.wait()
    untouched = plan(("prod", "deploy", ("h1",)), ("t-trial", "stop", ("s1", "s2")))  # the trial lane: no commit's
    assert ops.trials.claim(untouched, "c" * 40, full=True) == {"s1", "s2"}
    await asyncio.sleep(0.05)
    assert not trial.done(), "a plan that needs none of its hosts ended the trial"
    held = ops.trials.claim(plan(("eugr", "deploy", ("s2",))), "e" * 40, full=True)
    assert held == {"s1", "s2"}  # until its cleanup ran: the lane on s2 waits
    with pytest.raises(TrialDisplacedError, match=f"ended: commit {'e' * 12} needs host s2 \\(lane eugr\\)"):
        await trial
    assert log == ["t starts", "t cleaned up"] and ended == [True]
    assert ops.trials.hosts() == frozenset() and ops.busy() == frozenset()


async def test_two_trials_of_one_lane_run_one_after_the_other_even_on_other_hosts() -> None:
    ops, log = Operations(), list[str]()
    proposal, branch = Probe("proposal", log), Probe("branch", log)
    one = asyncio.create_task(ops.trial(("a-trial",), ("s1",), proposal.attempt, proposal.cleanup))
    await proposal.started.wait()
    two = asyncio.create_task(ops.trial(("a-trial",), ("s2",), branch.attempt, branch.cleanup))
    await asyncio.sleep(0.05)
    assert log == ["proposal starts"], "two ranks sets of one lane name ran at once"
    proposal.release.set()
    branch.release.set()
    assert (await one, await two) == ("proposal measured", "branch measured")
    assert log == ["proposal starts", "proposal cleaned up", "branch starts", "branch cleaned up"]
