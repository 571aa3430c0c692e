"""Notifications through the real daemon process on simulated Sparks, to local receivers.

One daemon with receivers of every kind Apprise can point at loopback (ntfy,
Matrix, a Gitea issue, generic JSON webhooks) and one that accepts
connections and never answers. The fleet then goes through a denied commit
(and a resync of it: a repeat), a rollout that never gets healthy and is
rolled back, and a host that stops answering and comes back. Each receiver
gets each event it is routed once, saying what happened, to which lane or
host and commit, and the command that helps; the hanging receiver slows no
cycle; the receivers' token reaches them only as a credential, never in a
message or the daemon's log.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from tests.support.example import EUGR, EUGR_REPO, NEVER_READY_HEALTH, PROD_HOSTS, PROD_REPO, PRODUCTION
from tests.support.receivers import Blackhole, Got, Receivers
from tests.support.waiting import wait_for
from tests.support.world import control_world

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

TIMEOUT_S = 4.0
ATTEMPTS = 3


def config(receivers: Receivers, hole: Blackhole, token_file: Path) -> str:
    hp = receivers.hostport
    return f"""
[notifications]
attempts = {ATTEMPTS}
backoff_s = 0.2
backoff_max_s = 0.5
timeout_s = {TIMEOUT_S}
[notifications.receivers.ops-ntfy]
url = "ntfy://{hp}/lanes?token={{secret}}"
credential_file = "{token_file}"
[notifications.receivers.ops-matrix]
url = "matrix://{{secret}}@{hp}/!lanesroom:localhost"
credential_file = "{token_file}"
[notifications.receivers.ops-forge]
url = "gitea://{{secret}}@{hp}/team/ops/7"
credential_file = "{token_file}"
[notifications.receivers.prod-only]
url = "json://{hp}/hook/prod"
labels = {{ role = "production" }}
[notifications.receivers.hosts-only]
url = "json://{hp}/hook/hosts"
events = ["host.unreachable", "host.back"]
[notifications.receivers.hangs]
url = "json://{hole.hostport}/hook/hangs"
events = ["commit.denied", "lane.rolled_back", "host.unreachable", "host.back"]
"""


def about(got: list[Got], *words: str) -> list[Got]:
    return [g for g in got if all(w in g.text for w in words)]


async def heard(receivers: Receivers, kinds: tuple[str, ...], *words: str, timeout: float = 60) -> None:
    """Wait until each receiver kind in `kinds` got a message with all of `words`."""
    for kind in kinds:

        def got(kind: str = kind) -> bool:
            return bool(about(receivers.of(kind), *words))

        await wait_for(got, timeout, f"{kind}: a message with {words}")


async def test_denied_rolled_back_and_unreachable_reach_every_routed_receiver_once(tmp_path: Path) -> None:
    token = "tok_" + secrets.token_hex(16)
    receivers = Receivers(token)
    hole = Blackhole()
    try:
        async with control_world(tmp_path, 917) as world:
            token_file = tmp_path / "notify-token"
            token_file.write_text(token + "\n")
            d = world.add_daemon(
                "daemon", log_level="info", extra=config(receivers, hole, token_file), connect_timeout_s=2.0
            )
            await d.start()
            await world.deployed(world.heads[0])
            chat = ("ntfy", "matrix", "gitea")

            # 1. A denied commit: production follows :latest (the image-digest rule).
            denied = world.commit("production: follow :latest", {PRODUCTION: {"image": f"{PROD_REPO}:latest"}})
            await heard(receivers, chat, "denied", PRODUCTION)
            await wait_for(lambda: bool(about(receivers.of("json"), "denied")), 30, "prod-only: denied")
            for kind in chat:
                text = about(receivers.of(kind), "denied")[0].text
                assert denied[:12] in text and "image-digest" in text
                assert f"lanes check --rev {denied}" in text
            cycles = len(d.events("cycle.done"))
            d.kick()  # a resync of the same commit: the same denial again
            await wait_for(lambda: len(d.events("cycle.done")) > cycles, 60, "the resync of the denied commit")

            # 2. A rollout that never gets healthy: eugr is rolled back.
            broken = world.fleet.registry.add(f"{EUGR_REPO}:never", env={"STANDIN_NEVER_HEALTHY": "1"}).pinned
            failed = world.commit(
                "eugr: an engine that never gets ready", {EUGR: {"image": broken, "health": NEVER_READY_HEALTH}}
            )
            await heard(receivers, chat, "rolled back", EUGR, timeout=120)
            for kind in chat:
                text = about(receivers.of(kind), "rolled back", EUGR)[0].text
                assert failed[:12] in text and f"lanes retry {EUGR}" in text

            # 3. A host stops answering, then comes back.
            await world.faults.cut_link(PROD_HOSTS[1])
            d.kick()
            await heard(receivers, chat, PROD_HOSTS[1], "stopped answering")
            await world.faults.restore_link(PROD_HOSTS[1])
            d.kick()
            await heard(receivers, chat, PROD_HOSTS[1], "answers again")
            down = about(receivers.of("ntfy"), "stopped answering")[0].text
            assert f"lanes hosts --host {PROD_HOSTS[1]}" in down and PRODUCTION in down
            await wait_for(lambda: len([g for g in receivers.of("json") if "/hook/hosts" in g.path]) == 2, 30, "hosts")

            # Each event reached each chat receiver once (the resync's repeat was not sent again).
            for kind in chat:
                assert len(about(receivers.of(kind), "denied", PRODUCTION)) == 1, kind
                assert len(about(receivers.of(kind), "rolled back", EUGR)) == 1, kind
            # Routing: the production-only hook got production's denial and host, never eugr's rollback;
            # the hosts-only hook got only the two host events.
            prod = [g for g in receivers.of("json") if "/hook/prod" in g.path]
            assert about(prod, "denied", PRODUCTION) and not about(prod, EUGR, "rolled back")
            hooks = [g for g in receivers.of("json") if "/hook/hosts" in g.path]
            assert sorted("stopped answering" in g.text for g in hooks) == [False, True]

            # The hanging receiver was tried (and hung), and no cycle waited for it: the denied commit's cycle
            # was done before the first try of its denial to the hanging receiver gave up (a retry, in the log).
            assert hole.accepted >= 1
            logged = d.events()
            done_at = next(
                i for i, e in enumerate(logged) if e["event"] == "cycle.done" and e.get("outcome") == "denied"
            )
            hung_at = next(
                i
                for i, e in enumerate(logged)
                if e["event"] in ("notification.retry", "notification.failed")
                and e.get("receiver") == "hangs"
                and e.get("kind") == "commit.denied"
            )
            assert done_at < hung_at, logged[done_at : hung_at + 1]
            assert any(e.get("receiver") == "hangs" for e in d.events("notification.failed"))
            # /metrics counts each receiver's outcomes: ntfy got denied, rolled back, down and back (4 sent);
            # the hosts-only hook the two host events; the hanging one failed at least once and sent nothing.
            _, text = await d.get("/metrics")
            counted = {
                line.split(" ")[0]: float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("lanes_notifications_total{")
            }
            # Every rollout that passed its gate is told too (the first deploy's, the one after the rollback's fix).
            rollouts = len(about(receivers.of("ntfy"), "rolled out"))
            sent = counted['lanes_notifications_total{outcome="sent",receiver="ops-ntfy"}']
            assert sent == 4.0 + rollouts, (counted, rollouts)
            assert counted['lanes_notifications_total{outcome="sent",receiver="hosts-only"}'] == 2.0, counted
            assert counted['lanes_notifications_total{outcome="failed",receiver="hangs"}'] >= 1.0, counted
            assert 'lanes_notifications_total{outcome="sent",receiver="hangs"}' not in counted
            assert "lanes_notifications_queued{" in text
            # It is still being sent to (four events, three tries of up to 4 s each) when the daemon stops: the
            # stop waits the grace for queued messages, then gives the hanging send up (and says so), never
            # waiting for its timeout; the others had nothing left.
            code = await d.stop()
            assert code == 0
            abandoned = d.events("notification.abandoned")
            assert [e["receiver"] for e in abandoned] == ["hangs"], abandoned

        # The token went to the receivers as their credential (positive control) and nowhere else.
        assert any(g.headers.get("authorization") == f"Bearer {token}" for g in receivers.of("ntfy"))
        assert any(g.headers.get("authorization") == f"token {token}" for g in receivers.of("gitea"))
        for g in receivers.got:
            assert token not in g.text and token.encode() not in g.body
        assert token not in d.log.read_text()
    finally:
        receivers.close()
        hole.close()
