"""A refused head through the real daemon process: an unsigned commit and a replayed old one are told once each,
with what to do; a receiver added by a reload (SIGHUP) gets the next event."""

from __future__ import annotations

import itertools
from pathlib import Path

import pygit2
import pytest

from tests.support.example import EUGR, example_state, fast, loaded
from tests.support.receivers import Receivers
from tests.support.signing import allowed_signers, signed
from tests.support.sparks import loopback
from tests.support.waiting import wait_for
from tests.support.world import world_over

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]
_salt = itertools.count(931)


async def test_an_unsigned_and_a_replayed_head_are_told_with_what_to_do(tmp_path: Path) -> None:
    receivers = Receivers("unused")
    hp = receivers.hostport
    try:
        async with world_over(
            loaded(fast(example_state())), tmp_path, tmp_path / "simwork", loopback(next(_salt))
        ) as w:
            alice, allowed = allowed_signers(tmp_path / "keys")
            old = signed(w, alice, "signed fleet\n")
            signing = f'require_signed_commits = "ssh"\nallowed_signers = "{allowed}"\n'
            d = w.add_daemon(
                "daemon",
                log_level="info",
                extra=signing + f'[notifications.receivers.ops]\nurl = "json://{hp}/hook/ops"\n',
            )
            await d.start()
            await w.deployed(old)
            new = signed(w, alice, "eugr: 4 sequences\n", {EUGR: {"max_num_seqs": 4}})
            await w.deployed(new, (EUGR,))

            # An unsigned commit on top: refused, and the message says how to get it signed.
            unsigned = w.commit("eugr: 2 sequences, unsigned", {EUGR: {"max_num_seqs": 2}})
            await wait_for(lambda: any(unsigned[:12] in g.text for g in receivers.got), 60, "the unsigned head told")
            (told,) = [g for g in receivers.got if unsigned[:12] in g.text]
            assert "refused" in told.text and "sign the commit" in told.text

            # A receiver added by a reload gets the next event; the replay of the old commit names the command.
            config = d.config.read_text()
            d.config.write_text(config + f'[notifications.receivers.added]\nurl = "json://{hp}/hook/added"\n')
            d.kick()
            await wait_for(lambda: bool(d.events("config.reloaded")), 30, "the reload")
            w.repo.repo.references.create("refs/heads/main", pygit2.Oid(hex=old), force=True)
            replay = f'lanes allow-rewind {old} --reason "..."'
            await wait_for(lambda: any(replay in g.text for g in receivers.got if "added" in g.path), 60, "the replay")
            assert any(replay in g.text for g in receivers.got if "/hook/ops" in g.path)
            cycles = len(d.events("cycle.done")) + len(d.events("commit.rewind_refused"))
            d.kick()  # the same refusal again at the resync: not told again
            await wait_for(
                lambda: len(d.events("cycle.done")) + len(d.events("commit.rewind_refused")) > cycles, 60, "resync"
            )
            assert await d.stop() == 0
        ops = [g for g in receivers.got if "/hook/ops" in g.path]
        assert len([g for g in ops if unsigned[:12] in g.text]) == 1
        assert len([g for g in ops if replay in g.text]) == 1
    finally:
        receivers.close()
