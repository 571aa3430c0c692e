"""A misspelled engine flag in the demo: refused as the engine would refuse it, before and on the Sparks.

`--kv-cache-dtpye` (not `--kv-cache-dtyp`: argparse takes a unique prefix as the flag it abbreviates,
and vLLM, having --kv-cache-dtype-skip-layers too, calls that one ambiguous). With the engine-flags rule
on, `lanes demo` denies the lane with vLLM's own words before anything runs; with the rule switched off,
the simulated rank exits 2 with argparse's usage and error, as vLLM 0.32 would, and the lane fails its
readiness gate with that output kept (with the preflight off too, which would deny it first).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from reconciler.cli.history import _outcome, read_applies
from reconciler.daemon.decider import CommitDecider
from reconciler.execute.cycle import CycleRunner
from reconciler.notifications.events import cycle_events
from reconciler.sim.containers import SimContainer
from reconciler.source.loadcommit import LoadedCommit
from reconciler.source.notes import verdict_lines
from reconciler.store.lanewriter import current
from reconciler.store.status import status_rows
from tests.policy.builders import with_rule
from tests.support.example import EUGR, PRODUCTION, example_policies, repo_files, with_lane
from tests.support.gitrepo import make_repo
from tests.support.world import World, sim_world

MISSPELLED = ["--kv-cache-dtpye", "fp8"]
VLLM_SAYS = "vllm: error: unrecognized arguments: --kv-cache-dtpye fp8"
_salt = itertools.count(1)


def _repo_with_misspelled_flag(path: Path) -> Path:
    files = repo_files()
    lane = f"state/lanes/{EUGR}.yaml"
    files[lane] = files[lane].replace(
        b"args: [--trust-remote-code]", b"args: [--trust-remote-code, --kv-cache-dtpye, fp8]"
    )
    # On the release itself, whose table is the parser it runs: a vLLM main build judged by that
    # release's table would only be warned about (it may take flags the release lacks).
    files[lane] = files[lane].replace(b"engine_version: 0.32.1.dev0+g8244d1c44", b"engine_version: 0.32.0")
    assert b"--kv-cache-dtpye" in files[lane] and b"engine_version: 0.32.0 " in files[lane]
    make_repo(path, files)
    return path


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_lanes_demo_denies_the_lane_with_the_engines_own_words(tmp_path: Path) -> None:
    repo = _repo_with_misspelled_flag(tmp_path / "state")
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler.cli.main", "demo", "--once", "--json", "--repo", str(repo)],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    lanes = {row["name"]: row for row in json.loads(proc.stdout)["lanes"]}
    assert lanes[EUGR]["health"] == "denied"
    assert "state/lanes/eugr-nightly-dsv41-3x.yaml: args: vllm 0.32.0 would refuse" in lanes[EUGR]["last_error"]
    assert VLLM_SAYS in lanes[EUGR]["last_error"]
    assert lanes[PRODUCTION]["health"] == "healthy"  # the other lanes converge regardless


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    base = f"127.{200 + os.getpid() % 40}.{next(_salt) % 250}."
    async with sim_world(tmp_path, base_address=base) as w:
        yield w


@pytest.mark.timeout(60)
async def test_with_the_rule_off_the_rank_exits_as_vllm_would_and_the_lane_fails_its_gate(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    exited: dict[str, int] = {}
    mark = SimContainer.mark_exited

    def recording(container: SimContainer, code: int) -> None:
        exited.setdefault(container.name, code)  # the failed ranks are removed afterwards; keep their codes
        mark(container, code)

    monkeypatch.setattr(SimContainer, "mark_exited", recording)
    lane = world.state.lanes[EUGR]
    state = with_lane(world.state, EUGR, args=[*lane.args, *MISSPELLED])
    policies = with_rule(example_policies(), "engine-flags", enabled=False)
    # Without the preflight too (which would deny it in vLLM's words first: tests/execute/test_preflight.py).
    runner = world.runner
    unchecked = CycleRunner(runner.transport, runner.store, runner.secrets, replace(runner.settings, preflight=False))
    result = await unchecked.run_cycle(LoadedCommit(state.commit, state, policies))
    assert not [v for v in result.verdict.violations if v.rule == "engine-flags" and v.lane == EUGR]
    res = {r.lane: r for r in result.results}[EUGR]
    assert res.result == "failed", res.error
    assert "readiness gate failed at stage 'port': a rank exited" in (res.error or "")
    assert sorted(res.logs) == [f"lanes-{EUGR}-r{i}@dgx{i + 5}" for i in range(3)]
    for log in res.logs.values():  # every rank: vLLM's parser runs on headless ranks too
        assert log.startswith("usage: vllm [-h] [-v]")
        assert log.rstrip("\n").endswith(VLLM_SAYS)
    # argparse's exit status; a rank whose exit the gate's failure overtook (its log above already ends with
    # vLLM's message) is stopped by the rollback instead: SIGTERM, 143. A loaded machine shows that order.
    assert sorted(exited) == [f"lanes-{EUGR}-r{i}" for i in range(3)]
    assert set(exited.values()) <= {2, 143} and 2 in exited.values(), exited
    assert {r.lane: r.result for r in result.results}[PRODUCTION] == "applied"


@pytest.mark.timeout(90)
async def test_the_engines_own_words_reach_status_history_the_note_and_the_notification(world: World) -> None:
    """The gate only knows "a rank exited"; vLLM's sentence is what every trace of the failure shows."""
    lane = world.state.lanes[EUGR]
    state = with_lane(world.state, EUGR, args=[*lane.args, *MISSPELLED])
    policies = with_rule(example_policies(), "engine-flags", enabled=False)
    # The preflight off too: a build it cannot judge lets the flag reach the ranks, whose exit is tested here.
    runner = world.runner
    unchecked = CycleRunner(runner.transport, runner.store, runner.secrets, replace(runner.settings, preflight=False))
    result = await unchecked.run_cycle(LoadedCommit(state.commit, state, policies))
    res = {r.lane: r for r in result.results}[EUGR]
    assert res.result == "failed" and VLLM_SAYS not in (res.error or ""), res.error

    row = {r["name"]: r for r in status_rows(world.store, state)}[EUGR]
    assert row["engine_error"] == VLLM_SAYS  # one line for all three ranks: they said the same
    # Kept in the lane's own state, beside its last error (not read back from the apply's logs).
    error = current(world.store, EUGR).error
    assert error is not None and error.engine == VLLM_SAYS
    code, table, err = await world.lanes("status", "--db", str(world.store.path), "--repo", str(world.tmp))
    assert VLLM_SAYS in " ".join(table.split()), (code, table, err)  # the table may wrap the column
    code, out, err = await world.lanes("status", "--json", "--db", str(world.store.path), "--repo", str(world.tmp))
    assert {r["name"]: r for r in json.loads(out)["lanes"]}[EUGR]["engine_error"] == VLLM_SAYS

    applies, problem = read_applies(Path(world.store.path))
    assert problem is None
    assert [a["engine_error"] for a in applies[(EUGR, state.commit)]] == [VLLM_SAYS]
    assert f"engine: {VLLM_SAYS}" in _outcome({"applies": applies[(EUGR, state.commit)], "commit": state.commit})

    verdict = CommitDecider._verdict(result)
    note = "\n".join(verdict_lines(verdict))
    assert f"lanes: failed {EUGR}: " in note and VLLM_SAYS in note

    (event,) = [e for e in cycle_events(result, state) if e.lanes == (EUGR,)]
    assert VLLM_SAYS in event.body()
    assert f"`lanes logs {EUGR}`" in event.action  # a command that prints the rank logs
    assert "lanes history" not in event.action
