"""An evidence regression through the real daemon process: with [bench] on, production's engine is replaced by one
that generates half as fast; the daemon's benchmark against the previous evidence flags it, and the receiver is
told which lane got slower at which commit, and how to undo it."""

from __future__ import annotations

import itertools
from pathlib import Path

import pygit2
import pytest

from tests.support.evidencerepo import evidence_files, lane_evidence
from tests.support.example import EUGR, PROD_REPO, PRODUCTION, example_state, fast, fast_files, loaded
from tests.support.receivers import Got, Receivers
from tests.support.sparks import loopback
from tests.support.waiting import wait_for
from tests.support.world import world_over

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
_salt = itertools.count(941)
QUICK = {"bench_profile": "quick"}


async def test_a_slower_engine_is_told_as_an_evidence_regression(tmp_path: Path) -> None:
    receivers = Receivers("unused")
    try:
        async with world_over(
            loaded(fast(example_state())), tmp_path, tmp_path / "simwork", loopback(next(_salt))
        ) as w:

            def slower() -> list[Got]:
                return [g for g in receivers.got if "got slower" in g.text]

            start = w.commit("fleet, benchmarked", {PRODUCTION: QUICK, EUGR: QUICK})
            hook = f'[notifications.receivers.ops]\nurl = "json://{receivers.hostport}/hook/ops"\n'
            d = w.add_daemon("daemon", log_level="info", extra=hook)
            d.config.write_text(d.config.read_text() + "[bench]\nenabled = true\n")
            await d.start()
            await w.deployed(start)
            await wait_for(lambda: bool(lane_evidence(w, PRODUCTION)), 120, "production's first evidence")
            # A first measurement has nothing to regress from (the rollouts themselves are told as such).
            assert not [g for g in receivers.got if "rolled out" not in g.text]

            slow = w.fleet.registry.add(f"{PROD_REPO}:slow", env={"STANDIN_TG_TPS": "20", "STANDIN_LOAD_S": "0.5"})
            files = {**fast_files(**{PRODUCTION: {**QUICK, "image": slow.pinned}, EUGR: QUICK}), **evidence_files(w)}
            change = w.repo.commit(files, "production: the slow build")
            await wait_for(lambda: len(lane_evidence(w, PRODUCTION)) == 2, 120, "production's evidence of the change")
            await wait_for(lambda: bool(slower()), 30, "the regression told")
            assert await d.stop() == 0
        (told,) = slower()
        # At the change, or at an evidence commit of the other lane that landed on top of it.
        measured = told.text.split("got slower (benchmark at ")[1][:12]
        assert measured == change[:12] or w.repo.repo.descendant_of(
            w.repo.repo.revparse_single(measured).id, pygit2.Oid(hex=change)
        ), told.text
        assert f"lanes history {PRODUCTION}" in told.text and "git revert" in told.text
        assert "tg" in told.text  # the metric that regressed is named
    finally:
        receivers.close()
