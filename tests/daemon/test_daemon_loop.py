"""The daemon in this process against simulated Sparks: watch, burst, deny, force-push, webhook, signatures."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pygit2
import pytest
from typer.testing import CliRunner

from reconciler.cli.main import app
from reconciler.daemon.config import load_config
from reconciler.daemon.notify import Notifier
from reconciler.daemon.service import Daemon
from reconciler.source.notes import read_note
from reconciler.source.webhook import sign
from reconciler.store.journal import Store
from tests.support.example import EUGR, PRODUCTION, fast_files
from tests.support.gitrepo import StateRepo
from tests.support.lanesproc import write_config
from tests.support.net import free_port
from tests.support.signing import signed_commit, ssh_key, ssh_sign
from tests.support.sparks import DemoEnv, sim_for_example, stop_sparks
from tests.support.storeview import lane_health
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]
_salt = itertools.count(1)


@dataclass
class Running:
    tmp: Path
    env: DemoEnv
    repo: StateRepo
    daemon: Daemon
    task: asyncio.Task[int]
    port: int

    @property
    def db(self) -> Path:
        return self.tmp / "daemon.db"

    def commands(self) -> int:
        return sum(len(self.env.fleet.commands_seen(h)) for h in self.env.fleet.targets)

    async def converged(self, lane: str, commit: str, timeout: float = 60) -> None:
        await wait_for(lambda: lane_health(self.db, lane) == ("healthy", commit), timeout, f"{lane} at {commit[:8]}")


async def start(
    tmp: Path, *, extra: str = "", files: dict[str, bytes] | None = None, bare: bool = False, append: str = ""
) -> Running:
    env = await sim_for_example(tmp, next(_salt))
    try:
        repo = StateRepo(tmp / "state-repo", bare=bare)
        head = repo.commit(files if files is not None else fast_files(), "initial fleet")
        port = free_port()
        config_path = write_config(tmp, repo.path, env, http_port=port, extra=extra)
        if append:
            config_path.write_text(config_path.read_text() + append)
        config = load_config(config_path)
        daemon = Daemon(config, notifier=Notifier(None), install_signals=False)
    except BaseException:
        await stop_sparks(env)
        raise
    task = asyncio.create_task(daemon.run())
    running = Running(tmp, env, repo, daemon, task, port)
    try:
        if not extra:
            await running.converged(EUGR, head)
            await running.converged(PRODUCTION, head)
    except BaseException:  # a start that fails leaves no daemon task and no simulated host behind
        await stop(running)
        raise
    return running


async def stop(running: Running) -> None:
    running.daemon.request_stop()
    try:
        assert await asyncio.wait_for(running.task, 30) == 0
    finally:
        await stop_sparks(running.env)


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[Running]:
    r = await start(tmp_path)
    try:
        yield r
    finally:
        await stop(r)


async def test_a_commit_reaches_the_hosts_through_the_local_watch(running: Running) -> None:
    await asyncio.sleep(0.3)  # let the first cycle's watch events settle
    kicks: list[str] = []
    kick = running.daemon.trigger.kick

    def recording(reason: str) -> None:
        kicks.append(reason)
        kick(reason)

    running.daemon.trigger.kick = recording  # type: ignore[method-assign]
    before = running.commands()
    head = running.repo.commit(fast_files(**{EUGR: {"max_num_seqs": 4}}), "eugr: 4 sequences")
    # 20 s only guards against a hang; what woke the daemon is told by the kicks, not by the time.
    latency = await wait_for(lambda: running.commands() > before, 20, "a host command after the commit", 0.005)
    woke_by = list(kicks)
    print(f"\ncommit to first host command: {latency * 1000:.0f} ms (local watch)")
    # The watch woke the daemon, before the interval fetch (every 30 s) or the resync (300 s) could.
    assert woke_by[:1] == ["watch"], woke_by
    await running.converged(EUGR, head)


async def test_a_burst_of_ten_commits_is_reconciled_once_at_the_newest(running: Running) -> None:
    await asyncio.sleep(0.3)
    store = Store(running.db)
    applies_before = len(store.applies(EUGR))
    shas = [running.repo.commit(fast_files(**{EUGR: {"max_num_seqs": n}}), f"eugr: {n}") for n in range(1, 11)]
    await running.converged(EUGR, shas[-1])
    await asyncio.sleep(0.5)
    assert len(store.applies(EUGR)) - applies_before == 1
    assert [store.commit_outcome(s) is not None for s in shas] == [False] * 9 + [True]
    store.close()


async def test_a_denied_commit_leaves_the_previous_lanes_running(running: Running) -> None:
    head_before = running.repo.head()
    unpinned = fast_files(**{PRODUCTION: {"image": "aidendle94/sparkrun-sglang-dsv41-gb10:latest"}})
    denied = running.repo.commit(unpinned, "production: follow :latest")
    store = Store(running.db)
    await wait_for(lambda: store.commit_outcome(denied) is not None, 10, "the verdict on the denied commit")
    outcome = store.commit_outcome(denied)
    assert outcome is not None and outcome["outcome"] == "denied"
    health, applied = lane_health(running.db, PRODUCTION)
    assert health == "denied" and applied == head_before
    for host in ("dgx1", "dgx2", "dgx3", "dgx4"):
        names = [n for n, c in running.env.fleet.runtime(host).containers.items() if c.status == "running"]
        assert names == [f"lanes-{PRODUCTION}-r{int(host[-1]) - 1}"]
    # The journal's row is written before the git note (`_record`): the note follows it.
    await wait_for(lambda: read_note(running.daemon.mirror.repo, denied) is not None, 10, "the commit's note")
    note = read_note(running.daemon.mirror.repo, denied)
    assert note is not None and "denied" in note and "image-digest" in note
    store.close()


async def test_a_force_pushed_branch_is_followed(running: Running) -> None:
    base = running.repo.head()
    moved = running.repo.commit(fast_files(**{EUGR: {"max_num_seqs": 2}}), "eugr: 2")
    await running.converged(EUGR, moved)
    rewritten = running.repo.commit(fast_files(**{EUGR: {"max_num_seqs": 3}}), "eugr: 3 (rewritten)", parents=[base])
    await running.converged(EUGR, rewritten)
    assert moved not in {str(c.id) for c in running.daemon.mirror.repo.walk(pygit2.Oid(hex=rewritten))}


async def test_the_webhook_accepts_a_good_signature_and_refuses_a_bad_one(running: Running) -> None:
    body = b'{"ref": "refs/heads/main", "after": "' + running.repo.head().encode() + b'", "repository": {}}'
    url = f"http://127.0.0.1:{running.port}/webhook"
    async with httpx.AsyncClient() as client:
        good = await client.post(
            url,
            content=body,
            headers={"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + sign(body, b"s3cret-for-tests")},
        )
        bad = await client.post(
            url,
            content=body,
            headers={"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + sign(body, b"wrong")},
        )
        # Another delivery (the same body again would be refused as a replay, 409).
        other = body + b"\n"
        gitea = await client.post(
            url, content=other, headers={"X-Gitea-Event": "push", "X-Gitea-Signature": sign(other, b"s3cret-for-tests")}
        )
        status = await client.get(f"http://127.0.0.1:{running.port}/status")
        metrics = await client.get(f"http://127.0.0.1:{running.port}/metrics")
        health = await client.get(f"http://127.0.0.1:{running.port}/healthz")
    assert good.status_code == 202 and "fetch" in good.text
    assert bad.status_code == 401
    assert gitea.status_code == 202
    assert health.status_code == 200
    lanes = {row["name"]: row["health"] for row in status.json()["lanes"]}
    assert lanes[PRODUCTION] == "healthy" and lanes[EUGR] == "healthy"
    assert "lanes_" in metrics.text


async def test_signed_heads_apply_and_unsigned_heads_are_refused(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    alice = ssh_key(keys, "alice")
    allowed = keys / "allowed_signers"
    public = " ".join(Path(f"{alice}.pub").read_text().split()[:2])  # noqa: ASYNC240 - test set-up
    allowed.write_text(f'alice@example.org namespaces="git" {public}\n')
    extra = f'require_signed_commits = "ssh"\nallowed_signers = "{allowed}"'
    r = await start(tmp_path, extra=extra)
    try:
        unsigned = r.repo.head()
        store = Store(r.db)
        await wait_for(lambda: store.commit_outcome(unsigned) is not None, 20, "the verdict on the unsigned head")
        assert store.commit_outcome(unsigned)["outcome"] == "refused"  # type: ignore[index]
        assert not any(c for h in r.env.fleet.targets for c in r.env.fleet.runtime(h).containers.values())
        signed = signed_commit(r.repo.repo, lambda payload: ssh_sign(alice, payload), "signed fleet\n")
        await r.converged(EUGR, signed)
        await wait_for(lambda: store.commit_outcome(signed) is not None, 10, "the verdict on the signed head")
        assert store.commit_outcome(signed)["outcome"] == "applied"  # type: ignore[index]
        store.close()
    finally:
        await stop(r)


async def test_a_changed_lane_is_benchmarked_and_its_evidence_pushed_with_trailers(tmp_path: Path) -> None:
    quick = {lane: {"bench_profile": "quick"} for lane in (EUGR, PRODUCTION)}
    r = await start(tmp_path, files=fast_files(**quick), bare=True, append="[bench]\nenabled = true\n")
    try:
        changed: dict[str, dict[str, Any]] = {
            EUGR: {"bench_profile": "quick", "max_num_seqs": 4},
            PRODUCTION: {"bench_profile": "quick"},
        }
        change = r.repo.commit(fast_files(**changed), "eugr: 4 sequences")

        git = r.repo.repo

        def evidence_for_change() -> pygit2.Commit | None:
            """An evidence commit for EUGR measured at the change or at a later commit containing it."""
            for c in git.walk(git.references["refs/heads/main"].target):
                fields = dict(line.split(": ", 1) for line in c.message.splitlines() if ": " in line)
                target = fields.get("Evidence-For")
                if (
                    fields.get("Lane") == EUGR
                    and target
                    and (target == change or git.descendant_of(pygit2.Oid(hex=target), pygit2.Oid(hex=change)))
                ):
                    return c
            return None

        await wait_for(lambda: evidence_for_change() is not None, 90, "the evidence commit of the change")
        ours = evidence_for_change()
        assert ours is not None and ours.author.name == "lanes"
        trailers = dict(line.split(": ", 1) for line in ours.message.strip().splitlines() if ": " in line)
        assert trailers["pp"].startswith("pp512") and trailers["tg"].startswith("tg32")
        folder = r.repo.repo[ours.tree[f"evidence/{EUGR}"].id]
        assert isinstance(folder, pygit2.Tree)
        names = {e.name or "" for e in folder}
        assert any(n.endswith(".json") for n in names) and any(n.endswith(".svg") for n in names)
        result = CliRunner().invoke(app, ["history", EUGR, "--repo", str(r.repo.path), "--db", str(r.db), "--json"])
        assert result.exit_code == 0, result.output
        assert f"evidence/{EUGR}/" in result.output and change in result.output

        def status_evidence() -> dict[str, Any]:
            status = CliRunner().invoke(app, ["status", "--repo", str(r.repo.path), "--db", str(r.db), "--json"])
            row = next(x for x in json.loads(status.output)["lanes"] if x["name"] == EUGR)
            return dict(row["evidence"])

        # The journal's headline is written once the evidence commit is on the branch (never before: a push
        # that fails must not leave status naming a commit that is nowhere), so it may trail the commit.
        await wait_for(lambda: "pp" in status_evidence(), 30, "the evidence's headline in lanes status")
        shown = status_evidence()
        assert shown["pp"].startswith("pp512") and shown["file"].startswith(f"evidence/{EUGR}/")
    finally:
        await stop(r)


async def test_a_resync_of_an_unchanged_head_does_not_parse_the_commit_again(
    running: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reconciler.source.loadcommit import load_commit as real

    parsed: list[str] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        parsed.append(str(args[1]))
        return real(*args, **kwargs)

    monkeypatch.setattr("reconciler.daemon.decider.load_commit", counting)
    for _ in range(2):
        before = running.commands()
        running.daemon.trigger.kick("resync")
        await wait_for(lambda b=before: running.commands() >= b + 7, 30, "a resync probing every host")  # type: ignore[misc]
    assert parsed == []
    head = running.repo.commit(fast_files(**{EUGR: {"max_num_seqs": 4}}), "eugr: 4 sequences")
    await running.converged(EUGR, head)
    assert parsed == [head]
