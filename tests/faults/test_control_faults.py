"""The fault matrix, control-node side: the daemon's own footing fails, the fleet must not notice.

Each case runs real daemon processes over simulated Sparks and asserts the end state: what runs on
every host (commit and image), the daemon's journal, lane, apply and commit rows, `lanes status
--json` (the real CLI), and what the daemon says on /healthz, /status, /metrics and in its log.

- the disk under the journal fills up (a real tmpfs, a real ENOSPC from sqlite), before a cycle and in
  the middle of an apply;
- the git remote disappears for a while, and a commit is pushed while it is away;
- the branch is force-pushed while a commit is being applied, removing that commit;
- two daemons (two lease owners) are pointed at one fleet.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import time
from collections import Counter
from pathlib import Path

import pygit2
import pytest

from reconciler.facts.commands import lease_argv
from reconciler.facts.lease_script import LEASE_CONFLICT_EXIT
from reconciler.observe.probe import lease_file as lease_file_of
from reconciler.source.loadcommit import LoadedCommit
from tests.support.disk import checkpoint_wal, fill, small_disk
from tests.support.example import EUGR, EUGR_HOSTS, PROD_HOSTS, PRODUCTION, example_policies, example_state, fast
from tests.support.lanesproc import DaemonProc
from tests.support.sparks import sim_for_example, stop_sparks
from tests.support.waiting import wait_for
from tests.support.world import World, control_world

DAEMONS = pytest.mark.timeout(240)  # each daemon test takes 20-30 s on two cores; room for a loaded machine
_salt = itertools.count(401)
ALL_HOSTS = PROD_HOSTS + EUGR_HOSTS
SETTLE_S = 5.0
"""How long a test lets a fault sit (several of the daemon's 2 s retries) before checking nothing moved."""


async def _end_state(world: World, d: DaemonProc, head: str, image: str, eugr: tuple[str, str]) -> None:
    """Production runs `image` from `head`, EUGR is untouched, and every record says so."""
    assert world.lane_runs(PRODUCTION, PROD_HOSTS, head, image)
    assert world.lane_runs(EUGR, EUGR_HOSTS, *eugr)
    assert d.unfinished_steps() == []
    assert d.integrity() == "ok"
    assert [a["result"] for a in d.applies(PRODUCTION, head)] == ["applied"]
    assert d.outcome(head) == "applied"
    rows = await world.lanes_status(d)
    assert (rows[PRODUCTION]["health"], rows[PRODUCTION]["commit"], rows[PRODUCTION]["last_error"]) == (
        "healthy",
        head,
        None,
    )
    assert (rows[EUGR]["health"], rows[EUGR]["commit"]) == ("healthy", eugr[0])


# -- 1. the journal's disk fills up -------------------------------------------------------


@pytest.mark.slow
@DAEMONS
async def test_a_full_journal_disk_changes_no_host_says_why_and_applies_once_space_returns(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        async with control_world(tmp_path, next(_salt)) as world:
            d = world.add_daemon("a", db=disk / "lanes.db")
            await d.start()
            first = world.repo.head()
            await d.converged(first)
            eugr = (first, world.image_of(EUGR))
            before = {h: world.containers(h) for h in ALL_HOSTS}

            await asyncio.to_thread(checkpoint_wal, d.db)
            filler = fill(disk)
            bump = world.image("bump-disk-full")
            head = world.commit("production: bump", {PRODUCTION: {"image": bump}})
            await wait_for(lambda: bool(d.events("store.unwritable")), 60, "the daemon to find the journal full")
            await asyncio.sleep(SETTLE_S)

            # Nothing it could not record was done: every host runs what it ran, the daemon runs and says why.
            assert d.running
            assert {h: world.containers(h) for h in ALL_HOSTS} == before
            code, text = await d.get("/healthz")
            assert code == 503, text
            assert "journal not writable" in text and "database or disk is full" in text, text
            status = await d.status()
            assert status["store"]["writable"] is False and status["head"] == first
            assert "database or disk is full" in status["store"]["problem"]
            assert await d.metric("lanes_store_writable") == 0
            event = d.events("store.unwritable")[0]
            assert "database or disk is full" in event["error"] and event["keeping"] == first
            rows = await world.lanes_status(d)  # the last good state, readable from the full disk
            assert (rows[PRODUCTION]["health"], rows[PRODUCTION]["commit"]) == ("healthy", first)
            code, view, table = await world.daemon_status(d)  # what a person asks the running daemon
            assert code == 1, table
            assert view["daemon"]["reachable"] is True and view["daemon"]["store"]["writable"] is False
            assert {r["name"]: r["health"] for r in view["lanes"]}[PRODUCTION] == "healthy"
            assert "not writable" in table and "database or disk is full" in table and "held in memory" in table
            assert d.integrity() == "ok"

            filler.unlink()
            await d.converged(head, lanes=(PRODUCTION,))
            await wait_for(lambda: bool(d.events("store.recovered")), 30, "the daemon to say the journal is back")
            code, text = await d.get("/healthz")
            assert code == 200, text
            assert await d.metric("lanes_store_writable") == 1
            await _end_state(world, d, head, bump, eugr)
            assert await d.stop() == 0


@pytest.mark.slow
@DAEMONS
async def test_the_disk_filling_up_mid_apply_holds_the_records_and_loses_none(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        async with control_world(tmp_path, next(_salt)) as world:
            d = world.add_daemon("a", db=disk / "lanes.db")
            await d.start()
            first = world.repo.head()
            await d.converged(first)
            eugr = (first, world.image_of(EUGR))

            bump = world.image("bump-mid-apply", load_s=4)
            world.slow(PROD_HOSTS, "docker run", 1.5)
            head = world.commit("production: bump", {PRODUCTION: {"image": bump}})
            await wait_for(
                lambda: any(r["kind"] == "start" for r in d.journal(PRODUCTION, head)), 60, "the start step", 0.01
            )
            await asyncio.to_thread(checkpoint_wal, d.db)
            filler = fill(disk)

            # The transaction goes on (stopping halfway would leave the lane down); its records wait in memory.
            await wait_for(lambda: bool(d.events("store.unwritable")), 60, "the daemon to find the journal full")
            await wait_for(lambda: world.lane_runs(PRODUCTION, PROD_HOSTS, head, bump), 60, "the new ranks")
            status = await d.status()
            assert status["store"]["writable"] is False and status["store"]["held_writes"] > 0
            by_lane = {row["name"]: row for row in status["lanes"]}
            assert (by_lane[PRODUCTION]["health"], by_lane[PRODUCTION]["commit"]) == ("healthy", head)
            assert [r["kind"] for r in d.unfinished_steps()] == ["start"]  # on disk: what was written in time
            assert (await d.get("/healthz"))[0] == 503

            filler.unlink()
            await d.converged(head, lanes=(PRODUCTION,))
            await wait_for(lambda: bool(d.events("store.recovered")), 30, "the daemon to say the journal is back")
            world.fast()
            steps = d.journal(PRODUCTION, head)
            assert [(r["kind"], r["state"]) for r in steps] == [
                (kind, "done")
                for kind in ("lease", "pull", "env-files", "drain", "stop", "gpu-free", "start", "wait-ready")
            ]
            await _end_state(world, d, head, bump, eugr)
            assert (await d.status())["store"]["held_writes"] == 0
            assert await d.stop() == 0


# -- 2. the git remote goes away for a while -----------------------------------------------


@pytest.mark.slow
@DAEMONS
async def test_an_unreachable_remote_keeps_the_last_commit_and_converges_when_it_is_back(tmp_path: Path) -> None:
    async with control_world(tmp_path, next(_salt), bare=True) as world:
        origin = world.repo.path
        d = world.add_daemon("a", url=f"file://{origin}", fetch_s=1)
        await d.start()
        first = world.repo.head()
        await d.converged(first)
        eugr = (first, world.image_of(EUGR))
        old = world.image_of(PRODUCTION)

        away = origin.with_name("origin-away.git")
        origin.rename(away)
        world.repo.reopen(away)
        bump = world.image("bump-remote")
        head = world.commit(
            "production: bump, pushed while the daemon cannot reach the remote", {PRODUCTION: {"image": bump}}
        )
        await wait_for(lambda: len(d.events("repo.fetch_failed")) >= 3, 60, "three failed fetches")

        assert d.running
        assert world.lane_runs(PRODUCTION, PROD_HOSTS, first, old)
        code, text = await d.get("/healthz")
        assert code == 200 and f"fetch of file://{origin} failing" in text, text
        status = await d.status()
        assert status["source"]["ok"] is False and status["source"]["failures"] >= 3
        assert status["head"] == first
        assert await d.metric("lanes_source_up") == 0
        assert await d.metric("lanes_source_fetch_failures_total") >= 3
        failed = d.events("repo.fetch_failed")[-1]
        assert failed["url"] == f"file://{origin}" and failed["keeping"] == first
        rows = await world.lanes_status(d, repo=d.dir / "mirror")
        assert (rows[PRODUCTION]["health"], rows[PRODUCTION]["commit"]) == ("healthy", first)
        code, view, table = await world.daemon_status(d)
        assert code == 0, table  # the fleet is served; the stale source is said, not failed
        assert view["daemon"]["source"]["ok"] is False and view["daemon"]["head"] == first
        assert f"fetch of file://{origin} failing" in table and "last fetched commit keeps running" in table

        away.rename(origin)
        world.repo.reopen(origin)
        await d.converged(head, lanes=(PRODUCTION,))
        recovered = d.events("repo.fetch_recovered")
        assert recovered and recovered[0]["down_s"] > 0
        code, text = await d.get("/healthz")
        assert code == 200 and "failing" not in text, text
        assert (await d.status())["source"]["ok"] is True
        assert await d.metric("lanes_source_up") == 1
        await _end_state(world, d, head, bump, eugr)
        assert await d.stop() == 0


# -- 3. a force-push removes the commit being applied ----------------------------------------


@pytest.mark.slow
@DAEMONS
async def test_a_force_push_during_an_apply_ends_with_only_the_new_branch_running(tmp_path: Path) -> None:
    async with control_world(tmp_path, next(_salt)) as world:
        d = world.add_daemon("a")
        await d.start()
        first = world.repo.head()
        await d.converged(first)
        eugr = (first, world.image_of(EUGR))

        doomed_image = world.image("doomed", load_s=3)
        world.slow(PROD_HOSTS, "docker run", 1.5)
        doomed = world.commit(
            "production: an image about to be force-pushed away", {PRODUCTION: {"image": doomed_image}}
        )
        await wait_for(
            lambda: any(r["kind"] == "start" for r in d.journal(PRODUCTION, doomed)), 60, "the doomed apply", 0.01
        )
        kept_image = world.image("kept")
        kept = world.commit("production: what the team meant", {PRODUCTION: {"image": kept_image}}, parents=[first])
        git = world.repo.repo
        assert not git.descendant_of(pygit2.Oid(hex=kept), pygit2.Oid(hex=doomed))

        await d.converged(kept, lanes=(PRODUCTION,))
        world.fast()
        on_branch = {str(c.id) for c in git.walk(pygit2.Oid(hex=kept))}
        for host in ALL_HOSTS:
            for box in world.containers(host):
                assert box.commit in on_branch and box.image != doomed_image, (host, box)
        assert all(r["state"] in {"done", "failed", "abandoned"} for r in d.journal(PRODUCTION, doomed))
        await _end_state(world, d, kept, kept_image, eugr)
        rows = await world.lanes_status(d)
        assert rows[PRODUCTION]["desired_commit"] == kept
        assert await d.stop() == 0


# -- 4. two daemons, one fleet ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_lease_outlives_its_ttl_while_the_transaction_holding_it_runs(tmp_path: Path) -> None:
    """Renewal: a step longer than the lease TTL must not let another reconciler in halfway."""
    env = await sim_for_example(tmp_path, next(_salt))
    try:
        state = fast(example_state())
        short = dataclasses.replace(state, fleet=state.fleet.model_copy(update={"lease_ttl_s": 2}))
        for host in PROD_HOSTS:
            env.fleet.runtime(host).latency["docker run"] = 3.0  # the start step outlasts the 2 s lease
        cycle = asyncio.create_task(env.runner.run_cycle(LoadedCommit(state.commit, short, example_policies())))
        runtime = env.fleet.runtime(PROD_HOSTS[0])
        lease_file = lease_file_of(short)
        await wait_for(lambda: lease_file in runtime.facts.leases, 30, "the lease on dgx1", 0.01)
        # Knock for 3.5 s, longer than the lease lasts; the transaction (3 s start, then a 2 s load) runs longer.
        answers = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3.5:
            answers.append(await runtime.execute(lease_argv("acquire", lease_file, "lanes-intruder", 60)))
            await asyncio.sleep(0.25)
        assert not cycle.done()
        result = await cycle
        assert {code for code, _, _ in answers} == {LEASE_CONFLICT_EXIT}
        shown = [json.loads(out)["lease"] for _, out, _ in answers]
        assert {lease["owner"] for lease in shown} == {"lanes-demo"}
        assert max(lease["expires"] for lease in shown) - min(lease["acquired"] for lease in shown) > 2  # renewed
        assert {r.lane: r.result for r in result.results if r.lane in (PRODUCTION, EUGR)} == {
            PRODUCTION: "applied",
            EUGR: "applied",
        }
        assert runtime.facts.leases.get(lease_file) is None  # given back at the end
    finally:
        await stop_sparks(env)


@pytest.mark.slow
@DAEMONS
async def test_two_daemons_on_one_fleet_take_turns_by_lease_and_agree(tmp_path: Path) -> None:
    async with control_world(tmp_path, next(_salt)) as world:
        world.record_acts()
        a, b = world.add_daemon("a"), world.add_daemon("b")
        await asyncio.gather(a.start(), b.start())
        first = world.repo.head()
        await asyncio.gather(a.converged(first), b.converged(first))

        # Both wanted every lane on an empty fleet: each rank was started once, under one owner's lease.
        runs = Counter((act.host, act.name) for act in world.acts if act.verb == "run")
        assert sorted(runs) == sorted(
            [(h, f"lanes-{PRODUCTION}-r{i}") for i, h in enumerate(PROD_HOSTS)]
            + [(h, f"lanes-{EUGR}-r{i}") for i, h in enumerate(EUGR_HOSTS)]
        )
        assert set(runs.values()) == {1}
        # Every act under one daemon's lease, but the preflight's pull: it runs before a transaction takes its
        # lease (its parse-only `docker run --rm` is not recorded as an act). Known, and said in the README.
        leased = [act for act in world.acts if not (act.verb == "pull" and act.holder is None)]
        assert all(act.holder in {a.owner, b.owner} for act in leased), world.acts
        for hosts in (PROD_HOSTS, EUGR_HOSTS):
            assert len({act.holder for act in leased if act.host in hosts}) == 1

        world.acts.clear()
        bump = world.image("bump-two-daemons", load_s=4)
        world.slow(PROD_HOSTS, "docker run", 1.5)
        head = world.commit("production: bump", {PRODUCTION: {"image": bump}})

        def blocked() -> DaemonProc | None:
            for d in (a, b):
                if "is leased by lanes-" in (d.lane_row(PRODUCTION).get("last_error") or ""):
                    return d
            return None

        await wait_for(lambda: blocked() is not None, 60, "one daemon to wait for the other's lease", 0.02)
        loser = blocked()
        assert loser is not None
        winner = b if loser is a else a
        assert winner.owner in loser.lane_row(PRODUCTION)["last_error"]
        assert loser.health(PRODUCTION)[0] == "healthy"  # waiting is not a failure of the lane

        await asyncio.gather(winner.converged(head, (PRODUCTION,)), loser.converged(head, (PRODUCTION,)))
        world.fast()
        assert world.lane_runs(PRODUCTION, PROD_HOSTS, head, bump)
        assert world.lane_runs(EUGR, EUGR_HOSTS, first, world.image_of(EUGR))
        acts = [act for act in world.acts if act.host in PROD_HOSTS and not (act.verb == "pull" and act.holder is None)]
        assert Counter(act.host for act in acts if act.verb == "run") == Counter(PROD_HOSTS)
        assert {act.holder for act in acts} == {winner.owner}

        assert [r["result"] for r in winner.applies(PRODUCTION, head)] == ["applied"]
        # The loser never ran a rank; it saw the new spec running and gated it itself before calling it
        # healthy (its own journal never saw it ready): health is observed by each reconciler.
        assert [r["result"] for r in loser.applies(PRODUCTION, head)] == ["verified"]
        loser_steps = loser.journal(PRODUCTION, head)
        # The loser met the winner's lease either in its probe (the planner blocks the lane, no step is
        # journaled) or at its own lease step (a failed lease step): never any other failed step.
        waits = [r for r in loser_steps if r["state"] == "failed"]
        assert all(r["kind"] == "lease" and winner.owner in r["error"] for r in waits), loser_steps
        assert [r["kind"] for r in loser_steps if r["state"] == "done"][-2:] == ["lease", "wait-ready"]
        reasons = [e["reason"] for e in loser.events("lane.blocked") if e.get("lane") == PRODUCTION]
        assert any(f"is leased by {winner.owner}" in r for r in reasons), reasons
        for d in (a, b):
            assert d.unfinished_steps() == []
            assert d.outcome(head) == "applied"
            rows = await world.lanes_status(d)
            assert {
                n: (r["health"], r["commit"], r["last_error"]) for n, r in rows.items() if n in (PRODUCTION, EUGR)
            } == {
                PRODUCTION: ("healthy", head, None),
                EUGR: ("healthy", first, None),
            }
        for host in ALL_HOSTS:
            assert all(box.status == "running" for box in world.containers(host))
        assert await a.stop() == 0
        assert await b.stop() == 0
