"""Notifications say what is true: a failure before anything stopped is not "the lane serves nothing", the
engine's own words come with a failed rollout, the rank logs are named by a command that prints them, and a
rollout that succeeded is an event too (a repair of drift is not a rollout)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from reconciler.execute.cycle import CycleResult
from reconciler.execute.results import LaneResult, Result
from reconciler.notifications.events import cycle_events
from reconciler.notifications.settings import EVENT_KINDS
from reconciler.plan.steps import Cause
from tests.support.example import EUGR, example_state

SHA = "0123456789abcdef0123456789abcdef01234567"
VLLM_SAYS = "vllm: error: unrecognized arguments: --enable-prefix-cachng"
RANK_LOG = f"usage: vllm [-h] [-v] {{chat,complete,serve}} ...\n                [--port PORT]\n{VLLM_SAYS}\n"


def _cycle(*results: LaneResult) -> CycleResult:
    return cast(CycleResult, SimpleNamespace(commit=SHA, results=list(results)))


def test_a_failure_before_any_rank_stopped_says_the_old_spec_still_serves() -> None:
    error = "image pull failed on dgx5: manifest unknown"
    (event,) = cycle_events(_cycle(LaneResult(EUGR, "deploy", Result.FAILED, error, untouched=True)), example_state())
    assert event.kind == "lane.failed" and error in event.what
    assert "Nothing was stopped; the old spec still serves" in event.what
    assert "serves nothing" not in event.what and "before anything stopped" in event.title


def test_a_failure_after_the_ranks_stopped_says_the_lane_serves_nothing() -> None:
    logs = {f"lanes-{EUGR}-r{i}@dgx{i + 5}": RANK_LOG for i in range(3)}
    error = "readiness gate failed at stage 'port': a rank exited while waiting for port"
    (event,) = cycle_events(_cycle(LaneResult(EUGR, "deploy", Result.FAILED, error, logs=logs)), example_state())
    assert "the lane serves nothing now" in event.what and "still serves" not in event.what
    assert f"{error}; engine: {VLLM_SAYS}." in event.what  # the same words of three ranks once
    assert f"`lanes logs {EUGR}`" in event.action


def test_a_rolled_back_rollout_quotes_the_engine_and_names_lanes_logs() -> None:
    logs = {f"lanes-{EUGR}-r0@dgx5": RANK_LOG}
    result = LaneResult(EUGR, "deploy", Result.ROLLED_BACK, "a rank exited; rolled back to c0ffee", logs=logs)
    (event,) = cycle_events(_cycle(result), example_state())
    assert VLLM_SAYS in event.what
    assert f"`lanes logs {EUGR}`" in event.action and "lanes history" not in event.action


def test_a_rollout_that_succeeded_is_an_event_and_a_repair_is_not() -> None:
    rolled = LaneResult(EUGR, "deploy", Result.APPLIED, timings={"total": 42.4}, cause=Cause.SPEC_CHANGED)
    repaired = LaneResult(EUGR, "deploy", Result.APPLIED, cause=Cause.DRIFT)
    verified = LaneResult(EUGR, "verify", Result.VERIFIED, cause=Cause.UNVERIFIED)
    (event,) = cycle_events(_cycle(rolled), example_state())
    assert event.kind == "lane.rolled_out" and event.severity == "success" and "lane.rolled_out" in EVENT_KINDS
    assert f"{EUGR} rolled out ({SHA[:12]})" in event.title and "in 42 s" in event.what
    assert cycle_events(_cycle(repaired, verified), example_state()) == []
