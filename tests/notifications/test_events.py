"""What each message says: what happened, to which lane or host and commit, and the command that helps."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from reconciler.execute.cycle import CycleResult
from reconciler.notifications.events import HostWatch, Refusal, proposal_event, refused_event, regression_event
from tests.support.example import EUGR, PRODUCTION, example_state

SHA = "0123456789abcdef0123456789abcdef01234567"


def test_a_rewind_refusal_names_the_allow_rewind_command_with_the_full_commit() -> None:
    reason = f"commit {SHA[:12]} does not descend from the last applied commit feedfacecafe"
    e = refused_event(SHA, reason, Refusal.REWIND)
    assert e.kind == "commit.refused" and e.lanes == ()  # the whole fleet: every receiver's lanes
    body = e.body()
    assert f'lanes allow-rewind {SHA} --reason "..."' in body
    assert f"Commit: {SHA[:12]}" in body and "does not descend" in body


def test_what_a_refusal_asks_for_follows_its_kind_not_its_words() -> None:
    """The decider says which rule refused the head; a sentence that happens to name the other rule decides nothing."""
    rewind = refused_event(SHA, "not signed, as it happens", Refusal.REWIND)
    assert f"lanes allow-rewind {SHA}" in rewind.action and "sign the commit" not in rewind.action
    unsigned = refused_event(SHA, "it does not descend, as it happens", Refusal.SIGNATURE)
    assert unsigned.action.startswith("sign the commit") and "allow-rewind" not in unsigned.action


def test_a_regression_names_the_metrics_and_the_revert() -> None:
    desired = example_state()
    ev: dict[str, Any] = {"regression": True, "comparison": {"regressions": ["tg128 c1: 52.9 -> 41.0 t/s (-22.5%)"]}}
    e = regression_event(PRODUCTION, SHA, "e" * 40, ev, desired)
    assert e.key == ("evidence.regression", PRODUCTION, SHA)
    assert "tg128 c1: 52.9 -> 41.0 t/s (-22.5%)" in e.what and SHA[:12] in e.what
    assert f"lanes history {PRODUCTION}" in e.action and "git revert" in e.action
    assert e.labels["role"] == frozenset({"production"})  # from dgx1..dgx4's labels: routed by label


def test_an_opened_proposal_points_at_its_pull_request_and_branch() -> None:
    e = proposal_event(EUGR, "v0.33.0", "lanes/upstream/eugr-v0.33.0", "http://forge/pr/4", SHA, example_state())
    assert "http://forge/pr/4" in e.body() and "lanes check --rev lanes/upstream/eugr-v0.33.0" in e.action
    assert e.labels["role"] == frozenset({"staging"})


def _cycle(reachable: dict[str, bool]) -> CycleResult:
    hosts = {h: SimpleNamespace(reachable=ok, error=None if ok else "connect timed out") for h, ok in reachable.items()}
    return cast(CycleResult, SimpleNamespace(commit=SHA, observed=SimpleNamespace(hosts=hosts)))


def test_a_host_is_told_once_when_it_stops_answering_and_once_when_it_is_back() -> None:
    desired = example_state()
    watch = HostWatch()
    assert watch.events(_cycle({"dgx1": True, "dgx5": True}), desired) == []
    down = watch.events(_cycle({"dgx1": True, "dgx5": False}), desired)
    assert [(e.kind, e.host) for e in down] == [("host.unreachable", "dgx5")]
    assert EUGR in down[0].lanes and "lanes hosts --host dgx5" in down[0].action
    assert watch.events(_cycle({"dgx5": False}), desired) == []  # still down: nothing new
    back = watch.events(_cycle({"dgx5": True}), desired)
    assert [(e.kind, e.host) for e in back] == [("host.back", "dgx5")]
    # Down again at the same commit: a new outage, not a repeat of the first one.
    again = watch.events(_cycle({"dgx5": False}), desired)
    assert [e.kind for e in again] == ["host.unreachable"] and again[0].key != down[0].key
    assert back[0].key[1] == down[0].key[1] == "dgx5#1" and again[0].key[1] == "dgx5#2"
