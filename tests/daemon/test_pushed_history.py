"""What a push without a signing key can do to the history the daemon shows (issue 24, holes 2 and 3).

With signing on, a daemon converged on a signed head is pushed an unsigned head whose lane file is an
alias bomb with a marker field, then a notes ref that says "applied" on that refused commit, built on
top of the daemon's own notes. Through the public interfaces only (pushes to the watched repository,
HTTP on loopback, the `lanes history` command):

- the lane page walks history from the newest accepted head, so the refused head's files are neither
  parsed nor shown (before: `last_head` was the refused head and its marker was on the page);
- the daemon's notes ref takes nothing from the pushed one and puts its own record back on the forge,
  signed (before: it fast-forwarded to the pushed notes, and the forge and every clone said "applied");
- `lanes history` on a clone that still holds the pushed note says that it disagrees with the journal.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pygit2
import pytest
from typer.testing import CliRunner

from reconciler.cli.main import app
from reconciler.daemon.config import load_config
from reconciler.daemon.notify import Notifier
from reconciler.daemon.service import Daemon
from reconciler.source.loadcommit import load_commit
from reconciler.source.notes import NOTES_REF, format_entry, read_note
from tests.support.example import PRODUCTION, fast_files
from tests.support.gitrepo import StateRepo
from tests.support.lanesproc import write_config
from tests.support.net import free_port
from tests.support.signing import allowed_signers, sign_files
from tests.support.sparks import start_sparks, stop_sparks
from tests.support.storeview import StoreView, lane_health
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
MARKER = "pushed-by-mallory"


class View(StoreView):
    def __init__(self, db: Path) -> None:
        self.db = db


def _bomb(levels: int) -> bytes:
    """A lane file's extra keys: nine aliases of the level below at each level (9**levels leaves)."""
    lines = [f"evil_marker: {MARKER}", "bomb0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"bomb{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 9) + "]" for n in range(1, levels)]
    return ("\n".join(lines) + "\n").encode()


async def test_a_pushed_head_and_a_pushed_notes_ref_rewrite_nothing_the_daemon_shows(tmp_path: Path) -> None:
    alice, allowed = allowed_signers(tmp_path / "keys")
    origin = StateRepo(tmp_path / "origin.git", bare=True)
    files = fast_files()
    good = sign_files(origin.repo, alice, files, "signed fleet\n")
    desired = load_commit(origin.repo, good)
    env = await start_sparks(desired, tmp_path / "sim", base_address="127.91.24.")
    task: asyncio.Task[int] | None = None
    daemon: Daemon | None = None
    try:
        port = free_port()
        extra = f'require_signed_commits = "ssh"\nallowed_signers = "{allowed}"'
        config_path = write_config(tmp_path, origin.path, env, http_port=port, extra=extra)
        daemon = Daemon(load_config(config_path), notifier=Notifier(None), install_signals=False)
        task = asyncio.create_task(daemon.run())
        db = tmp_path / "daemon.db"
        view = View(db)
        await wait_for(lambda: lane_health(db, PRODUCTION) == ("healthy", good), 60, "production at the signed commit")

        # Push access, no key: a lane file that is an alias bomb with a marker.
        lane = f"state/lanes/{PRODUCTION}.yaml"
        unsigned = origin.commit({**files, lane: files[lane] + _bomb(4)}, "faster engine")
        daemon.trigger.kick("webhook")
        await wait_for(lambda: view.outcome(unsigned) == "refused", 30, "the unsigned head refused")
        async with httpx.AsyncClient(timeout=30) as client:
            page = await client.get(f"http://127.0.0.1:{port}/lanes/{PRODUCTION}")
        assert page.status_code == 200, page.text[:500]
        assert MARKER not in page.text and "bomb" not in page.text
        history = page.text.split('<section id="history"', 1)[1].split("</section>", 1)[0]
        assert good[:12] in history and unsigned[:12] not in history

        # Then a notes ref saying "applied" on the refused commit, on top of the daemon's own notes.
        await wait_for(lambda: NOTES_REF in origin.repo.references, 30, "the daemon's notes pushed")
        mallory = pygit2.Signature("mallory", "mallory@example.org")
        applied = {"outcome": "applied", "lanes": [{"lane": "everything", "result": "applied"}]}
        origin.repo.create_note(format_entry(unsigned, applied) + "\n", mallory, mallory, unsigned, NOTES_REF, True)
        pushed_tip = origin.repo.references[NOTES_REF].target
        clone = tmp_path / "laptop.git"
        laptop = pygit2.clone_repository(str(origin.path), str(clone), bare=True)
        laptop.references.create(NOTES_REF, pushed_tip, force=True)  # a clone fetched while the pushed tip was there

        daemon.trigger.kick("webhook")

        def forge_tip_is_the_daemons() -> bool:
            tip = origin.repo.references[NOTES_REF].target
            return tip != pushed_tip and origin.repo.descendant_of(tip, pushed_tip)

        await wait_for(forge_tip_is_the_daemons, 30, "the daemon's notes back on the forge")
        with daemon.mirror.lock:
            mine = read_note(daemon.mirror.repo, unsigned) or ""
        assert "lanes: applied everything" not in mine and "refused" in mine
        forge_note = read_note(origin.repo, unsigned) or ""
        assert "lanes: applied everything" not in forge_note and "refused" in forge_note
        tip = origin.repo[origin.repo.references[NOTES_REF].target]
        assert isinstance(tip, pygit2.Commit)
        signature, _ = tip.gpg_signature
        assert signature is not None and signature.startswith(b"-----BEGIN SSH SIGNATURE-----")
        # The pushed commit is unsigned: a verifier tells it from the daemon's.
        pushed = origin.repo[pushed_tip]
        assert isinstance(pushed, pygit2.Commit) and pushed.gpg_signature[0] is None
    finally:
        if daemon is not None and task is not None:
            daemon.request_stop()
            await asyncio.wait_for(task, 30)
        await stop_sparks(env)

    run = CliRunner().invoke(app, ["history", PRODUCTION, "--repo", str(clone), "--db", str(db), "--json"])
    assert run.exit_code == 0, run.output
    entries = {e["commit"]: e for e in json.loads(run.stdout)["lanes"][PRODUCTION]}
    assert "journal says refused" in str(entries[unsigned]["note_disagrees"]), entries[unsigned]
    assert entries[good]["note_disagrees"] is None, entries[good]
    text = CliRunner().invoke(app, ["history", PRODUCTION, "--repo", str(clone), "--db", str(db)])
    assert "note disagrees with the journal" in " ".join(text.output.split()), text.output
