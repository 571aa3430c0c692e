"""The dispatcher: publish never waits, retries with backoff, repeats dropped, rates kept, full queues bounded."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
import structlog
import structlog.testing

from reconciler.notifications import hub
from reconciler.notifications.dispatch import Bucket, Dispatcher
from reconciler.notifications.events import Event, Refusal, refused_event
from reconciler.notifications.receivers import ReceiverError
from reconciler.notifications.settings import NotificationSettings, ReceiverSettings
from reconciler.upstream.proposals import ProposalOutcome
from tests.support.example import EUGR, example_state
from tests.support.receivers import Blackhole, Receivers

pytestmark = pytest.mark.timeout(60)


def event(kind: str = "lane.failed", lane: str = "eugr", commit: str = "a" * 40) -> Event:
    return Event(kind, f"lanes: {lane} {kind}", "what", "`lanes retry eugr`", commit=commit, lanes=(lane,))


def settings(timeout_s: float = 1.0, **receivers: str) -> NotificationSettings:
    return NotificationSettings(
        attempts=3,
        backoff_s=0.05,
        backoff_max_s=0.1,
        timeout_s=timeout_s,
        receivers={name: ReceiverSettings(url=url, rate_per_minute=600) for name, url in receivers.items()},
    )


@pytest.fixture
def receivers() -> Iterator[Receivers]:
    r = Receivers("unused")
    yield r
    r.close()


async def until(predicate: object, timeout: float = 10.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def test_the_bucket_lets_a_burst_through_then_the_rate() -> None:
    now = [100.0]
    bucket = Bucket(60, burst=5, clock=lambda: now[0])  # one a second
    assert [bucket.reserve() for _ in range(5)] == [0.0] * 5
    assert bucket.reserve() == pytest.approx(1.0)  # the 6th: one token short at 1/s
    now[0] += 0.5
    assert bucket.reserve() == pytest.approx(1.5)  # -1 + 0.5 refilled - 1 = -1.5 tokens
    now[0] += 60
    assert bucket.reserve() == 0.0  # refilled to the burst, never above


async def test_a_failing_receiver_is_retried_and_a_repeat_is_sent_once(receivers: Receivers) -> None:
    receivers.failing["json"] = 2  # answers 503 twice, then takes it
    d = Dispatcher(settings(hook=f"json://{receivers.hostport}/hook/a"))
    d.start()
    try:
        d.publish([event()])
        d.publish([event()])  # the same event again (a resync): not sent twice
        d.publish([event(commit="b" * 40)])  # the same lane at another commit: a new event
        await until(lambda: d.sent == 2)
    finally:
        await d.close()
    assert [g.kind for g in receivers.got] == ["json", "json"]
    assert d.failed == 0


async def test_a_receiver_that_never_takes_it_is_given_up_after_its_attempts(receivers: Receivers) -> None:
    receivers.failing["json"] = 100
    d = Dispatcher(settings(hook=f"json://{receivers.hostport}/hook/a"))
    d.start()
    try:
        with structlog.testing.capture_logs() as logged:
            d.publish([event()])
            await until(lambda: d.failed == 1)
    finally:
        await d.close()
    assert d.sent == 0 and receivers.failing["json"] == 100 - 3  # three tries, then no more
    failed = [e for e in logged if e["event"] == "notification.failed"]
    assert failed and "503" in failed[0]["error"], failed  # the receiver's answer, as Apprise logged it


async def test_a_hanging_receiver_delays_neither_publish_nor_the_others(receivers: Receivers) -> None:
    hole = Blackhole()
    # The hanging send outlasts the test (its 120 s timeout against the test's 60): what the others do, they
    # do while it hangs.
    d = Dispatcher(
        settings(timeout_s=120, hangs=f"json://{hole.hostport}/hook", hook=f"json://{receivers.hostport}/hook/a")
    )
    d.start()
    try:
        for i in range(20):
            d.publish([event(lane=f"lane{i}")])
        # publish returned with all 20 queued for both receivers before any send began: nothing waited for.
        assert d.queued() == {"hangs": 20, "hook": 20} and receivers.got == [] and hole.accepted == 0
        await until(lambda: len(receivers.got) == 20 and d.sent == 20)  # the count follows the receiver's copy
        # The other receiver's 20 went while the hanging one's first was still in flight.
        assert d.sent == 20 and d.failed == 0 and d.queued()["hangs"] == 19 and hole.accepted == 1
    finally:
        await d.close(grace_s=0.1)
        hole.close()


async def test_a_full_queue_drops_its_oldest_message() -> None:
    release = threading.Event()
    calls: list[str] = []

    def blocked(r: ReceiverSettings, title: str, body: str, severity: str, timeout_s: float) -> None:
        calls.append(title)
        release.wait(10)

    s = NotificationSettings(queue_size=2, receivers={"slow": ReceiverSettings(url="json://127.0.0.1:9/x")})
    d = Dispatcher(s, sender=blocked)
    d.start()
    try:
        d.publish([event(lane="e1")])
        await until(lambda: calls == ["lanes: e1 lane.failed"])  # e1 is being sent; the queue is empty
        d.publish([event(lane=f"e{i}") for i in range(2, 6)])  # e2, e3 queued; e4 drops e2, e5 drops e3
        assert d.dropped == 2
        release.set()
        await until(lambda: d.sent == 3)
        # What `close` waits for (every queue joined) is done: the dropped messages are not waited for.
        await asyncio.wait_for(asyncio.gather(*(r.queue.join() for r in d.receivers.values())), 10)
    finally:
        release.set()
        await d.close(grace_s=5)
    assert calls == ["lanes: e1 lane.failed", "lanes: e4 lane.failed", "lanes: e5 lane.failed"]


async def test_a_sender_that_raises_anything_never_reaches_the_caller() -> None:
    def broken(r: ReceiverSettings, title: str, body: str, severity: str, timeout_s: float) -> None:
        raise (ReceiverError("refused") if "e1" in title else RuntimeError("a bug in a plugin"))

    s = NotificationSettings(attempts=1, receivers={"x": ReceiverSettings(url="json://127.0.0.1:9/x")})
    d = Dispatcher(s, sender=broken)
    d.start()
    try:
        d.publish([event(lane="e1"), event(lane="e2")])
        await until(lambda: d.failed == 2)
    finally:
        await d.close()


async def test_the_hub_does_nothing_without_receivers_and_routes_with_them(receivers: Receivers) -> None:
    assert hub.start(NotificationSettings()) is None
    hub.on_refused("c" * 40, "not signed", Refusal.SIGNATURE)  # no dispatcher: nothing, no error
    started = hub.start(settings(all=f"json://{receivers.hostport}/hook/all"))
    assert started is not None
    try:
        hub.on_refused("c" * 40, "commit cccccccccccc does not descend from the last applied commit", Refusal.REWIND)
        await until(lambda: len(receivers.got) == 1)
    finally:
        await hub.stop()
    text = receivers.got[0].text
    assert f'lanes allow-rewind {"c" * 40} --reason "..."' in text
    assert refused_event("c" * 40, "not signed by an allowed signer", Refusal.SIGNATURE).action.startswith(
        "sign the commit"
    )


async def test_only_an_opened_proposal_is_told(receivers: Receivers) -> None:
    hub.start(settings(all=f"json://{receivers.hostport}/hook/all"))
    try:
        desired = example_state()
        branch = f"lanes/proposals/{EUGR}/0.33.0"
        hub.on_proposal(ProposalOutcome(lane=EUGR, action="exists", version="0.33.0"), "c" * 40, desired)
        hub.on_proposal(
            ProposalOutcome(lane=EUGR, action="opened", version="0.33.0", branch=branch, pr_url="http://forge/pr/9"),
            "c" * 40,
            desired,
        )
        await until(lambda: len(receivers.got) == 1)
        await asyncio.sleep(0.2)  # nothing else comes
    finally:
        await hub.stop()
    (told,) = receivers.got
    assert "http://forge/pr/9" in told.text and f"lanes check --rev {branch}" in told.text


async def test_many_hanging_receivers_hold_up_none_of_the_others(receivers: Receivers) -> None:
    hole = Blackhole()
    hanging = {f"hangs{i}": f"json://{hole.hostport}/hook" for i in range(6)}
    d = Dispatcher(settings(timeout_s=120, **hanging, hook=f"json://{receivers.hostport}/hook/a"))
    d.start()
    try:
        d.publish([event()])
        # The receiver holds it before the dispatcher has read its answer and counted it sent: wait for both.
        await until(lambda: len(receivers.got) == 1 and d.sent == 1)
        # Sent while all six hanging sends were still in flight (their 120 s timeout outlasts the test's 60).
        assert d.sent == 1 and d.failed == 0 and all(d.receivers[name].sending for name in hanging)
        await until(lambda: hole.accepted >= 6)  # all six were being sent to at once
    finally:
        await d.close(grace_s=0.1)
        hole.close()


async def test_close_gives_up_a_hanging_send_and_says_so(receivers: Receivers) -> None:
    hole = Blackhole()
    d = Dispatcher(
        settings(timeout_s=120, hangs=f"json://{hole.hostport}/hook", hook=f"json://{receivers.hostport}/hook/a")
    )
    d.start()
    try:
        d.publish([event(lane="e1"), event(lane="e2")])
        await until(lambda: len(receivers.got) == 2 and hole.accepted == 1)
        with structlog.testing.capture_logs() as logged:
            await d.close(grace_s=0.1)  # returns: the hanging send is not waited for (120 s timeout, the test's 60)
    finally:
        hole.close()
    abandoned = [e for e in logged if e["event"] == "notification.abandoned"]
    assert [(e["receiver"], e["in_flight"], e["queued"]) for e in abandoned] == [("hangs", True, 1)]
    assert all(r.task is not None and r.task.done() for r in d.receivers.values())
