"""Anti-rollback through the real daemon process: with signing on, a force-push of an older signed commit
(a replay) is refused, said in /status, the git note and the log, until `lanes allow-rewind` records who
allowed it and why."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pygit2
import pytest

from reconciler.source.notes import read_note
from tests.support.example import EUGR, example_state, fast, loaded
from tests.support.signing import allowed_signers, signed
from tests.support.sparks import loopback
from tests.support.waiting import wait_for
from tests.support.world import world_over

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
_salt = itertools.count(171)


async def test_a_replayed_old_signed_commit_is_refused_until_an_operator_allows_it(tmp_path: Path) -> None:
    async with world_over(loaded(fast(example_state())), tmp_path, tmp_path / "simwork", loopback(next(_salt))) as w:
        alice, allowed = allowed_signers(tmp_path / "keys")
        old = signed(w, alice, "signed fleet\n")
        d = w.add_daemon("daemon", extra=f'require_signed_commits = "ssh"\nallowed_signers = "{allowed}"')
        await d.start()
        await w.deployed(old)
        new = signed(w, alice, "eugr: 4 sequences\n", {EUGR: {"max_num_seqs": 4}})
        await w.deployed(new, (EUGR,))

        # Someone with push access but no key force-pushes the old signed commit back.
        w.repo.repo.references.create("refs/heads/main", pygit2.Oid(hex=old), force=True)
        await wait_for(lambda: w.outcome(old) == "refused", 30, "the replay refused")
        reason = w.commit_outcome(old)["detail"]["refused"]
        assert f"does not descend from the last applied commit {new[:12]}" in reason
        assert f"lanes allow-rewind {old}" in reason
        status = await d.status()
        assert status["refused"] == {"commit": old, "reason": reason}
        assert "refused" in status["phase"] and "does not descend" in status["phase"]
        _, _, table = await w.daemon_status(d)
        assert "does not descend" in table
        # From the journal alone (no --daemon), as a person on the control node reads it.
        code, out, err = await w.lanes("status", "--db", str(d.db), "--repo", str(w.repo.path), "--json")
        assert code == 0, err
        assert (
            json.loads(out)["refused"]["commit"] == old and "does not descend" in json.loads(out)["refused"]["reason"]
        )
        code, out, err = await w.lanes("status", "--db", str(d.db), "--repo", str(w.repo.path))
        assert f"head {old[:12]} refused" in out and "does not descend" in out, out
        await wait_for(lambda: "does not descend" in (read_note(w.repo.repo, old) or ""), 30, "the note pushed")
        assert "lanes: refused" in (read_note(w.repo.repo, old) or "")
        assert any("does not descend" in e.get("reason", "") for e in d.events("commit.rewind_refused"))
        assert w.health(EUGR) == ("healthy", new)  # what ran stays

        # An operator allows it: who and why are recorded, and the daemon applies the old commit.
        code, out, err = await w.lanes(
            "allow-rewind", old, "--reason", "eugr back to 8 sequences", "--db", str(d.db), "--by", "ops-test", "--json"
        )
        assert code == 0, err
        assert json.loads(out)["by"] == "ops-test"
        rows = w.rows("select * from rewinds where sha = ?", old)
        assert rows and rows[0]["reason"] == "eugr back to 8 sequences" and rows[0]["by"] == "ops-test"
        d.kick()
        await wait_for(lambda: w.outcome(old) == "applied", 60, "the allowed rewind applied")
        await w.converged(old, (EUGR,))
        assert any(e.get("by") == "ops-test" for e in d.events("commit.rewind_allowed"))
        assert (await d.status())["refused"] is None
