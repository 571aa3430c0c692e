"""Signing and [bench] together, through the real daemon process: the daemon signs its evidence commits with
its own SSH key (listed as `lanes-evidence` in the allowed signers), so the head they make is one it keeps
reconciling, and drift repair goes on after an evidence commit."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from reconciler.source.signatures import verify_commit
from tests.support.evidencerepo import decided_evidence
from tests.support.example import EUGR, EUGR_HOSTS, PRODUCTION, example_state, fast, loaded
from tests.support.signing import allowed_signers, signed
from tests.support.sparks import loopback
from tests.support.waiting import wait_for
from tests.support.world import world_over

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]
_salt = itertools.count(191)
QUICK = {EUGR: {"bench_profile": "quick"}, PRODUCTION: {"bench_profile": "quick"}}


def add_evidence_signer(allowed: Path, public: Path) -> None:
    """The daemon's own key (the one it reaches the hosts with), declared for evidence commits only."""
    key = " ".join(public.read_text().split()[:2])
    with allowed.open("a") as out:
        out.write(f'lanes-evidence namespaces="git" {key}\n')


async def test_with_signing_and_bench_on_the_daemon_keeps_reconciling_after_its_evidence(tmp_path: Path) -> None:
    async with world_over(loaded(fast(example_state())), tmp_path, tmp_path / "simwork", loopback(next(_salt))) as w:
        alice, allowed = allowed_signers(tmp_path / "keys")
        add_evidence_signer(allowed, Path(f"{w.fleet.client_key_path}.pub"))
        start = signed(w, alice, "signed fleet, benchmarked\n", QUICK)
        d = w.add_daemon("daemon", extra=f'require_signed_commits = "ssh"\nallowed_signers = "{allowed}"')
        d.config.write_text(d.config.read_text() + "[bench]\nenabled = true\n")
        await d.start()
        await w.deployed(start)

        git = w.repo.repo
        head = await decided_evidence(w)
        assert w.outcome(head) == "applied", w.commit_outcome(head)
        check = verify_commit(git, head, mode="ssh", allowed_signers=allowed)
        assert check.ok and check.signer == "lanes-evidence" and check.evidence_only
        assert not d.events("commit.refused")

        # Drift: a rank removed by hand is put back by the daemon that now stands on its own evidence commit.
        await w.docker(EUGR_HOSTS[0], "rm", "-f", f"lanes-{EUGR}-r0")
        d.kick()
        await wait_for(
            lambda: any(b.name == f"lanes-{EUGR}-r0" and b.status == "running" for b in w.containers(EUGR_HOSTS[0])),
            60,
            "the removed rank redeployed",
        )
        await wait_for(lambda: w.health(EUGR)[0] == "healthy", 60, "eugr healthy again")
