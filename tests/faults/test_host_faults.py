"""The fault matrix on simulated Sparks, host side (issue 8): each case asserts the end state.

A host rebooted mid-apply, a link cut and restored (mid-apply and between cycles), sshd refusing our
key, a replaced host key, the registry down during a pull, a model path missing on one host. For each:
what runs where afterwards (container, commit, image, on which host), what the store's journal, lane
and apply rows say, what `lanes status --json` prints, and that nothing is lost: the old ranks serve
until new ones replace them, the other lanes are never touched, and the lane converges once the fault
is gone. The daemon cases run the real daemon process; the others the real reconcile cycle.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asyncssh
import pytest

from reconciler.errors import HostUnreachableError
from reconciler.lane import FLAP_LIMIT
from reconciler.plan.steps import Cause
from reconciler.sim.registry import DOCKER_HUB, Outage, SimRegistry
from reconciler.sim.runtime import SimContainerRuntime
from reconciler.store.lanewriter import BACKOFF_SCALE_ENV
from reconciler.transport import HostTarget, SSHTransport
from tests.support.example import EUGR, EUGR_HOSTS, EUGR_REPO, PROD_HOSTS, PROD_REPO, PRODUCTION, example_state
from tests.support.waiting import wait_for
from tests.support.world import cycle_world, daemon_world
from tests.transport.sshfake import FakeSSHServer

pytestmark = [pytest.mark.slow]

BACKOFF_SCALE = 0.1
"""The daemons whose test waits for a passing fault's backoff to run out wait a tenth of it (the errors' own
waits are asserted in tests/lane and tests/execute): each step of the retry is the real one, sooner."""


# -- 1. a host rebooted mid-apply ------------------------------------------------------------------------


@pytest.mark.timeout(240)
async def test_a_host_rebooted_mid_apply_fails_the_lane_cleanly_and_it_converges_by_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BACKOFF_SCALE_ENV, str(BACKOFF_SCALE))  # the daemon's passing-fault waits: 60 s -> 6 s
    async with daemon_world(tmp_path, 301) as w:
        first = w.heads[0]
        old_image = w.image_of(PRODUCTION)
        eugr_before = w.snapshot(EUGR_HOSTS)
        new_image = w.env.fleet.registry.add(f"{PROD_REPO}:reboot", env={"STANDIN_LOAD_S": "5"}).pinned
        head = w.commit("production: bump (a host reboots)", {PRODUCTION: {"image": new_image}})
        await wait_for(lambda: w.journal_has(PRODUCTION, "wait-ready", head), 60, "the readiness wait", 0.01)

        lost = await w.faults.reboot("dgx3")  # a worker rank's host: power gone, sshd gone
        assert lost == [f"lanes-{PRODUCTION}-r2"]
        await wait_for(lambda: bool(w.applies(PRODUCTION, head)), 60, "the end of the transaction")

        (apply,) = w.applies(PRODUCTION, head)
        assert apply["result"] == "failed", apply
        assert "dgx3" in apply["error"], apply["error"]
        # While dgx3 is down: the last healthy spec is back on the hosts that answer, nothing on dgx3,
        # no new-image container anywhere, and the other lane never noticed.
        for rank, host in enumerate(PROD_HOSTS):
            boxes = [(b.name, b.status, b.commit, b.image) for b in w.containers(host)]
            want = [] if host == "dgx3" else [(f"lanes-{PRODUCTION}-r{rank}", "running", first, old_image)]
            assert boxes == want, host
        assert w.snapshot(EUGR_HOSTS) == eugr_before
        status = await w.lanes_status()
        assert status[PRODUCTION]["health"] == "failed"
        assert status[PRODUCTION]["commit"] == first and status[PRODUCTION]["desired_commit"] == head
        assert "dgx3" in status[PRODUCTION]["last_error"]
        assert status[EUGR]["health"] == "healthy"
        # A host fault during the gate is transient: the spec is not condemned, it is tried again after a
        # backoff, and the reason says the host stopped answering, not that a rank exited.
        lane = w.lane_row(PRODUCTION)
        assert lane["failed_fingerprint"] is None and lane["retry_at"] is not None, lane
        assert lane["transient_failures"] == 1
        assert "dgx3 stopped answering" in str(lane["last_error"]), lane["last_error"]
        assert "a rank exited" not in str(lane["last_error"])
        assert f"a passing fault: tried again in {60 * BACKOFF_SCALE:.0f} s" in str(lane["last_error"])

        # sshd is back; no `lanes retry`, no kick: the daemon tries the spec again when its backoff ends.
        await w.faults.boot("dgx3")
        await w.deployed(head, (PRODUCTION,), timeout=90)  # the first backoff of a host fault: 60 s, scaled
        assert w.lane_runs(PRODUCTION, PROD_HOSTS, head, new_image)
        assert w.snapshot(EUGR_HOSTS) == eugr_before
        assert [a["result"] for a in w.applies(PRODUCTION, head)] == ["failed", "applied"]
        assert w.unfinished_steps() == []
        status = await w.lanes_status()
        assert (status[PRODUCTION]["health"], status[PRODUCTION]["last_error"]) == ("healthy", None)
        assert await w.daemon.stop() == 0


@pytest.mark.timeout(120)
async def test_a_head_host_rebooted_mid_apply_and_back_at_once_is_rolled_back_to_the_old_spec(tmp_path: Path) -> None:
    async with cycle_world(tmp_path, 308) as w:
        first = w.heads[0]
        old_image = w.image_of(PRODUCTION)
        eugr_before = w.snapshot(EUGR_HOSTS)
        new_image = w.env.fleet.registry.add(f"{PROD_REPO}:reboot-head", env={"STANDIN_LOAD_S": "5"}).pinned
        head = w.commit("production: bump (the head reboots)", {PRODUCTION: {"image": new_image}})
        cycle = asyncio.create_task(w.cycle())
        await wait_for(lambda: w.journal_has(PRODUCTION, "wait-ready", head), 60, "the readiness wait", 0.01)
        # The head's host goes down and comes straight back; docker kept its records: exited, not running.
        assert await w.faults.reboot("dgx1", keep_records=True) == [f"lanes-{PRODUCTION}-r0"]
        await w.faults.boot("dgx1")
        result = await asyncio.wait_for(cycle, 90)

        res = {r.lane: r for r in result.results}[PRODUCTION]
        assert res.result == "rolled-back", res.error
        assert f"lanes-{PRODUCTION}-r0@dgx1 is exited" in (res.error or ""), res.error
        assert w.lane_runs(PRODUCTION, PROD_HOSTS, first, old_image)  # the old spec everywhere, dgx1's included
        assert w.snapshot(EUGR_HOSTS) == eugr_before
        (apply,) = w.applies(PRODUCTION, head)
        assert apply["result"] == "rolled-back" and "dgx1" in apply["error"]
        assert [r["kind"] for r in w.journal(PRODUCTION, head)][-2:] == ["wait-ready", "rollback"]
        assert w.unfinished_steps() == []
        status = await w.lanes_status()
        assert (status[PRODUCTION]["health"], status[PRODUCTION]["commit"]) == ("degraded", first)
        assert "dgx1" in status[PRODUCTION]["last_error"] and "rolled back" in status[PRODUCTION]["last_error"]

        # Condemned until `lanes retry`; then the next cycle converges on the new image.
        assert (await w.cycle()).plan.lane(PRODUCTION).action == "blocked"  # type: ignore[union-attr]
        code, _, err = await w.lanes("retry", PRODUCTION, "--db", str(w.db))
        assert code == 0, err
        result = await w.cycle()
        assert {r.lane: r.result for r in result.results}[PRODUCTION] == "applied"
        assert w.lane_runs(PRODUCTION, PROD_HOSTS, head, new_image)
        assert w.snapshot(EUGR_HOSTS) == eugr_before


@pytest.mark.timeout(300)
async def test_a_host_that_faults_during_every_gate_is_retried_then_condemned_at_the_flap_limit(tmp_path: Path) -> None:
    async with cycle_world(tmp_path, 309) as w:
        eugr_before = w.snapshot(EUGR_HOSTS)
        new_image = w.env.fleet.registry.add(f"{PROD_REPO}:flap", env={"STANDIN_LOAD_S": "5"}).pinned
        head = w.commit("production: bump (a worker's host faults in every gate)", {PRODUCTION: {"image": new_image}})
        for failure in range(1, FLAP_LIMIT + 1):
            cycle = asyncio.create_task(w.cycle())
            await wait_for(lambda: w.in_step(PRODUCTION, "wait-ready"), 60, "the readiness wait", 0.01)
            await w.faults.reboot("dgx3")  # gone, and stays gone until the cycle ends
            result = await asyncio.wait_for(cycle, 120)
            res = {r.lane: r for r in result.results}[PRODUCTION]
            assert res.result == "failed", res  # rolled back where hosts answer; dgx3 could not be restored
            assert "dgx3 stopped answering" in (res.error or ""), res.error
            record = w.store.lane(PRODUCTION)
            assert record is not None and record.transient_failures == failure
            if failure < FLAP_LIMIT:
                assert record.failed_fingerprint is None and record.retry_at is not None
                # The first wait is HostFaultError's 60 s, doubling with each fault of the same spec in a row.
                assert f"a passing fault: tried again in {60 * 2 ** (failure - 1)} s" in (record.last_error or "")
            else:
                assert record.failed_fingerprint is not None and record.retry_at is None
                assert f"{FLAP_LIMIT} times in a row" in (record.last_error or "")
            await w.faults.boot("dgx3")
            if failure < FLAP_LIMIT:
                held = (await w.cycle(apply=False)).plan.lane(PRODUCTION)  # dgx3 answers: only the backoff holds
                assert held is not None and (held.action, held.cause) == ("blocked", Cause.BACKOFF)
                w.store.update_lane(PRODUCTION, retry_at=time.time() - 1)  # the backoff has run out
        held = (await w.cycle(apply=False)).plan.lane(PRODUCTION)
        assert held is not None and (held.action, held.cause) == ("blocked", Cause.CONDEMNED)
        assert [a["result"] for a in w.applies(PRODUCTION, head)] == ["failed"] * FLAP_LIMIT
        assert w.snapshot(EUGR_HOSTS) == eugr_before


# -- 2. a link cut and restored ---------------------------------------------------------------------------


@pytest.mark.timeout(180)
async def test_a_link_cut_during_the_pull_keeps_the_old_ranks_and_the_resync_converges_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 10 s resync: it is what retries the lane here. Every state checked below also holds after a cycle
    # that runs while the link is still cut (the lane is then blocked, which changes nothing).
    monkeypatch.setenv(BACKOFF_SCALE_ENV, str(BACKOFF_SCALE))  # the unreachable pull's backoff: 30 s -> 3 s
    async with daemon_world(tmp_path, 302, resync_s=10) as w:
        first = w.heads[0]
        old_image = w.image_of(EUGR)
        eugr_before = w.snapshot(EUGR_HOSTS)
        prod_before = w.snapshot(PROD_HOSTS)
        new_image = w.env.fleet.registry.add(f"{EUGR_REPO}:linkcut", env={"STANDIN_LOAD_S": "1"}).pinned
        for host in EUGR_HOSTS:
            w.env.fleet.runtime(host).latency["docker pull"] = 3.0  # a pull long enough to cut the cable in
        head = w.commit("eugr: bump (a link is cut)", {EUGR: {"image": new_image}})
        pulling = ["docker", "pull", new_image]
        await wait_for(lambda: pulling in w.env.fleet.commands_seen("dgx6"), 60, "the pull on dgx6", 0.01)
        await w.faults.cut_link("dgx6")  # the pull's connection drops, new ones hang until the connect timeout
        await wait_for(lambda: bool(w.applies(EUGR, head)), 60, "the end of the transaction")

        (apply,) = w.applies(EUGR, head)
        assert apply["result"] == "failed" and "dgx6" in apply["error"] and "unreachable" in apply["error"], apply
        assert [r["kind"] for r in w.journal(EUGR, head)] == ["lease", "pull"]  # failed before any stop
        # Nothing was stopped: the old ranks, dgx6's included (its engine never noticed the cable), still run.
        assert w.snapshot(EUGR_HOSTS) == eugr_before
        assert w.snapshot(PROD_HOSTS) == prod_before
        status = await w.lanes_status()
        assert status[EUGR]["health"] == "degraded" and status[EUGR]["commit"] == first
        assert "dgx6" in status[EUGR]["last_error"]
        assert status[PRODUCTION]["health"] == "healthy"

        # The cable is back: the daemon's own next look (its resync, or its retry of a lane it found blocked)
        # converges, with no kick and no `lanes retry`: nothing was condemned.
        for host in EUGR_HOSTS:
            w.env.fleet.runtime(host).latency.clear()
        await w.faults.restore_link("dgx6")
        await w.deployed(head, (EUGR,))
        assert w.lane_runs(EUGR, EUGR_HOSTS, head, new_image)
        assert w.snapshot(PROD_HOSTS) == prod_before
        assert [a["result"] for a in w.applies(EUGR, head)] == ["failed", "applied"]
        assert old_image != new_image and w.unfinished_steps() == []
        status = await w.lanes_status()
        assert (status[EUGR]["health"], status[EUGR]["commit"], status[EUGR]["last_error"]) == ("healthy", head, None)
        assert await w.daemon.stop() == 0


@pytest.mark.timeout(120)
async def test_a_link_cut_between_cycles_blocks_only_its_lanes_and_heals_without_a_restart(tmp_path: Path) -> None:
    async with cycle_world(tmp_path, 303) as w:
        first = w.heads[0]
        before = w.snapshot(PROD_HOSTS + EUGR_HOSTS)
        await w.faults.cut_link("dgx6")
        result = await w.cycle()
        by_lane = {r.lane: r for r in result.results}
        assert by_lane[EUGR].result == "blocked" and by_lane[PRODUCTION].result == "noop"
        assert "dgx6" in result.observed.unreachable()
        error = by_lane[EUGR].error or ""
        assert "dgx6" in error and "timed out" in error, error
        assert w.snapshot(PROD_HOSTS + EUGR_HOSTS) == before  # dgx6's rank serves on behind the cut
        assert w.journal(EUGR, first)[-1]["kind"] == "wait-ready"  # no step since the first deploy
        status = await w.lanes_status()
        assert status[EUGR]["health"] == "degraded" and "dgx6" in status[EUGR]["last_error"]
        assert status[PRODUCTION]["health"] == "healthy" and status[PRODUCTION]["last_error"] is None

        await w.faults.restore_link("dgx6")
        result = await w.cycle()
        assert result.plan.empty
        assert w.snapshot(PROD_HOSTS + EUGR_HOSTS) == before  # healed by looking, not by restarting
        status = await w.lanes_status()
        assert (status[EUGR]["health"], status[EUGR]["commit"], status[EUGR]["last_error"]) == ("healthy", first, None)


# -- 3. sshd refusing our key ---------------------------------------------------------------------------------


@pytest.mark.timeout(180)
async def test_sshd_refusing_the_key_is_a_clear_error_for_that_host_only_and_recovers(tmp_path: Path) -> None:
    async with daemon_world(tmp_path, 304) as w:
        first = w.heads[0]
        eugr_before = w.snapshot(EUGR_HOSTS)
        await w.faults.refuse_key("dgx6")
        prod_image = w.env.fleet.registry.add(f"{PROD_REPO}:keys", env={"STANDIN_LOAD_S": "1"}).pinned
        eugr_image = w.env.fleet.registry.add(f"{EUGR_REPO}:keys", env={"STANDIN_LOAD_S": "1"}).pinned
        head = w.commit(
            "both lanes: bump (dgx6 refuses our key)",
            {PRODUCTION: {"image": prod_image}, EUGR: {"image": eugr_image}},
        )
        await w.deployed(head, (PRODUCTION,))
        await wait_for(lambda: bool(w.commit_outcome(head)), 60, "the daemon's verdict on the commit")

        assert w.lane_runs(PRODUCTION, PROD_HOSTS, head, prod_image)  # the other lane went ahead
        assert w.snapshot(EUGR_HOSTS) == eugr_before  # nothing sent to dgx5/dgx7 either: the lane is one unit
        assert w.journal(EUGR, head) == [] and w.applies(EUGR, head) == []
        verdict = {v["lane"]: v for v in w.commit_outcome(head)["detail"]["lanes"]}
        assert verdict[EUGR]["result"] == "blocked" and verdict[PRODUCTION]["result"] == "applied"
        status = await w.lanes_status()
        error = status[EUGR]["last_error"]
        assert status[EUGR]["health"] == "degraded" and status[EUGR]["commit"] == first
        assert "dgx6" in error and "refused" in error and "client keys" in error, error
        assert "timed out" not in error  # a refusal, said as one: not a host that is slow or down
        assert "dgx5" not in error and "dgx7" not in error

        w.faults.accept_key("dgx6")
        w.daemon.kick()
        await w.deployed(head, (EUGR,))
        assert w.lane_runs(EUGR, EUGR_HOSTS, head, eugr_image)
        assert w.lane_runs(PRODUCTION, PROD_HOSTS, head, prod_image)
        status = await w.lanes_status()
        assert status[EUGR]["last_error"] is None and w.unfinished_steps() == []
        assert await w.daemon.stop() == 0


# -- 4. a host key replaced -------------------------------------------------------------------------------------


@pytest.mark.timeout(180)
async def test_a_replaced_host_key_is_refused_nothing_is_sent_and_status_says_why(tmp_path: Path) -> None:
    async with daemon_world(tmp_path, 305) as w:
        first = w.heads[0]
        eugr_before = w.snapshot(EUGR_HOSTS)
        prod_before = w.snapshot(PROD_HOSTS)
        await w.faults.replace_host_key("dgx7")
        sent_before = len(w.env.fleet.commands_seen("dgx7"))
        eugr_image = w.env.fleet.registry.add(f"{EUGR_REPO}:hostkey", env={"STANDIN_LOAD_S": "1"}).pinned
        head = w.commit("eugr: bump (dgx7 has a new host key)", {EUGR: {"image": eugr_image}})
        await wait_for(lambda: bool(w.commit_outcome(head)), 60, "the daemon's verdict on the commit")

        assert len(w.env.fleet.commands_seen("dgx7")) == sent_before  # not even the probe
        assert w.snapshot(EUGR_HOSTS) == eugr_before and w.snapshot(PROD_HOSTS) == prod_before
        assert w.journal(EUGR, head) == [] and w.applies(EUGR, head) == []
        outcome = w.commit_outcome(head)
        assert outcome["outcome"] == "blocked", outcome
        (verdict,) = [v for v in outcome["detail"]["lanes"] if v["lane"] == EUGR]
        assert "dgx7" in verdict["error"] and "host key" in verdict["error"] and "changed" in verdict["error"]
        status = await w.lanes_status()
        error = status[EUGR]["last_error"]
        assert status[EUGR]["health"] == "degraded" and status[EUGR]["commit"] == first
        assert "dgx7" in error and "has changed" in error and "known_hosts" in error, error
        assert status[PRODUCTION]["health"] == "healthy"

        # A person checks the new key and pins it: the next cycle converges.
        w.faults.repin_host_key("dgx7")
        w.daemon.kick()
        await w.deployed(head, (EUGR,))
        assert w.lane_runs(EUGR, EUGR_HOSTS, head, eugr_image)
        assert w.snapshot(PROD_HOSTS) == prod_before
        assert await w.daemon.stop() == 0


# -- 5. the registry down during a pull -----------------------------------------------------------------------


@pytest.mark.timeout(180)
async def test_the_registry_down_during_a_pull_fails_the_lane_before_any_stop_and_converges_once_it_is_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BACKOFF_SCALE_ENV, str(BACKOFF_SCALE))  # the daemon's passing-fault waits: 30 s -> 3 s
    async with daemon_world(tmp_path, 306) as w:
        first = w.heads[0]
        prod_before = w.snapshot(PROD_HOSTS)
        eugr_before = w.snapshot(EUGR_HOSTS)
        registry = w.env.fleet.registry
        new_image = registry.add(f"{PROD_REPO}:registry-down", env={"STANDIN_LOAD_S": "1"}).pinned
        for host in PROD_HOSTS:
            w.env.fleet.runtime(host).latency["docker pull"] = 3.0  # a pull long enough for the registry to go down in
        head = w.commit("production: bump (the registry goes down)", {PRODUCTION: {"image": new_image}})
        await wait_for(lambda: w.journal_has(PRODUCTION, "pull", head), 60, "the pull", 0.01)
        registry.go_down()
        await wait_for(lambda: bool(w.applies(PRODUCTION, head)), 60, "the end of the transaction")

        (apply,) = w.applies(PRODUCTION, head)
        assert apply["result"] == "failed", apply
        error = apply["error"]
        assert f'Get "https://{DOCKER_HUB}/v2/"' in error and "connection refused" in error, error
        assert "docker pull" in error and all(h in error for h in PROD_HOSTS), error
        assert [r["kind"] for r in w.journal(PRODUCTION, head)] == ["lease", "pull"]
        assert w.snapshot(PROD_HOSTS) == prod_before  # the old ranks were never stopped
        assert w.snapshot(EUGR_HOSTS) == eugr_before
        status = await w.lanes_status()
        assert status[PRODUCTION]["health"] == "degraded" and status[PRODUCTION]["commit"] == first
        assert "connection refused" in status[PRODUCTION]["last_error"]
        assert w.lane_row(PRODUCTION)["failed_fingerprint"] is None  # not condemned: retried as is
        assert f"a passing fault: tried again in {30 * BACKOFF_SCALE:.0f} s" in status[PRODUCTION]["last_error"]

        for host in PROD_HOSTS:
            w.env.fleet.runtime(host).latency.clear()
        registry.come_back()
        # No kick: a transient failure is retried by the daemon itself once its backoff (30 s, scaled) runs out.
        await w.deployed(head, (PRODUCTION,))
        assert w.lane_runs(PRODUCTION, PROD_HOSTS, head, new_image)
        assert w.snapshot(EUGR_HOSTS) == eugr_before
        assert [a["result"] for a in w.applies(PRODUCTION, head)] == ["failed", "applied"]
        status = await w.lanes_status()
        assert status[PRODUCTION]["last_error"] is None and w.unfinished_steps() == []
        assert await w.daemon.stop() == 0


# -- 6. a model path missing on one host ------------------------------------------------------------------------


@pytest.mark.timeout(120)
async def test_a_model_path_missing_on_one_host_is_refused_before_any_rank_stops(tmp_path: Path) -> None:
    async with cycle_world(tmp_path, 307) as w:
        first = w.heads[0]
        before = w.snapshot(PROD_HOSTS + EUGR_HOSTS)
        old_image = w.image_of(PRODUCTION)
        state = example_state()
        path = state.models[state.lanes[PRODUCTION].model].path
        w.faults.remove_model("dgx3", path)
        new_image = w.env.fleet.registry.add(f"{PROD_REPO}:model-gone", env={"STANDIN_LOAD_S": "1"}).pinned
        head = w.commit("production: bump (the model is gone from dgx3)", {PRODUCTION: {"image": new_image}})
        sent = {h: len(w.env.fleet.commands_seen(h)) for h in PROD_HOSTS}
        result = await w.cycle()

        res = {r.lane: r for r in result.results}[PRODUCTION]
        assert res.result == "failed"
        assert "dgx3" in (res.error or "") and path in (res.error or "")
        # Refused at planning: no lease, no pull, no stop; one probe per host and nothing else.
        assert w.journal(PRODUCTION, head) == [] and w.applies(PRODUCTION, head) == []
        assert {h: len(w.env.fleet.commands_seen(h)) - sent[h] for h in PROD_HOSTS} == dict.fromkeys(PROD_HOSTS, 1)
        assert w.snapshot(PROD_HOSTS + EUGR_HOSTS) == before
        assert w.lane_runs(PRODUCTION, PROD_HOSTS, first, old_image)
        status = await w.lanes_status()
        row = status[PRODUCTION]
        assert row["commit"] == first and row["desired_commit"] == head
        assert row["health"] == "degraded", row  # the old spec still serves: not failed
        assert "dgx3" in row["last_error"] and path in row["last_error"]

        # The model is back (re-downloaded): the next cycle deploys, no retry needed.
        w.faults.restore_model("dgx3", path)
        result = await w.cycle()
        assert {r.lane: r.result for r in result.results}[PRODUCTION] == "applied"
        assert w.lane_runs(PRODUCTION, PROD_HOSTS, head, new_image)
        status = await w.lanes_status()
        assert (status[PRODUCTION]["health"], status[PRODUCTION]["last_error"]) == ("healthy", None)


# -- a session cut under a running command (the transport's side of a cut link or a reboot) ------------------


class _HangsUp(FakeSSHServer):
    """`hangup` ends its session with no exit status and no signal, as a dying connection does."""

    async def _fake_command(self, process: asyncssh.SSHServerProcess[str], argv: list[str]) -> int | None:
        if argv[:1] == ["hangup"]:
            process.close()
            return None
        return await super()._fake_command(process, argv)


@pytest.mark.timeout(30)
async def test_a_session_that_ends_without_a_status_is_an_unreachable_host_not_a_killed_command(
    tmp_path: Path,
) -> None:
    # The link-cut case meets this as a race: the channel closes before the connection's close arrives.
    server = _HangsUp(workdir=tmp_path)
    await server.start()
    transport = SSHTransport(
        server.write_known_hosts(server.known_hosts_line()), [server.client_key_path], connect_timeout=5.0
    )
    target = HostTarget(name="dgx6", address="127.0.0.1", port=server.port, user="lanes")
    try:
        for check in (True, False):  # check=False too: `docker stop` must not read a lost session as done
            with pytest.raises(HostUnreachableError, match="dgx6: unreachable: connection dropped"):
                await transport.run(target, ["hangup"], check=check)
        assert (await transport.run(target, ["echo", "still", "here"])).stdout == "still here\n"
    finally:
        await transport.close()
        await server.stop()


# -- what a pull from a registry that is down prints, by how it is down ------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("outage", "says"),
    [
        ("refused", 'Get "https://ghcr.io/v2/": dial tcp 203.0.113.'),
        ("timeout", 'Get "https://ghcr.io/v2/": net/http: request canceled while waiting for connection'),
        ("503", "received unexpected HTTP status: 503 Service Unavailable"),
    ],
)
async def test_a_registry_that_is_down_fails_pulls_as_docker_says_it(tmp_path: Path, outage: Outage, says: str) -> None:
    registry = SimRegistry()
    ref = registry.add("ghcr.io/eugr/spark-vllm:nightly").pinned
    runtime = SimContainerRuntime("dgx5", "127.0.0.1", registry, tmp_path)
    registry.go_down(outage)
    status, out, err = await runtime.execute(["docker", "pull", ref])
    assert (status, out) == (1, "") and err.startswith("Error response from daemon: ") and says in err, err
    status, _, err = await runtime.execute(["docker", "run", "-d", "--name", "engine", ref])
    assert status == 125 and err.startswith(f"Unable to find image '{ref}' locally\ndocker: Error response"), err
    assert says in err and runtime.containers == {}
    registry.come_back()
    assert (await runtime.execute(["docker", "pull", ref]))[0] == 0
    assert (await runtime.execute(["docker", "image", "inspect", ref]))[0] == 0  # what was pulled stays pulled
    registry.go_down(outage)
    assert (await runtime.execute(["docker", "image", "inspect", ref]))[0] == 0
