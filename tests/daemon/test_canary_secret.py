"""A canary secret, set through a lane's secret reference, reaches the hosts' env files and nothing else.

The daemon runs as a process at debug log level against simulated Sparks,
converges, benchmarks a change and pushes its evidence and notes, then
rolls back an image that never gets healthy (failure paths log the most).
Afterwards every byte it could have written is swept: its log, the sqlite
files, every object and ref of the forge and of its own mirror, every other
file it left, what `lanes status` / `lanes history` print, and what its
HTTP endpoints answer. The positive control: the canary is in the 0600 env
file on each production host, so the sweep is looking for a value that was
really used.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import secrets
import signal
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pygit2
import pytest
from typer.testing import CliRunner

from reconciler.cli.main import app
from tests.support.example import EUGR, NEVER_READY_HEALTH, PROD_HOSTS, PRODUCTION, fast_files
from tests.support.gitrepo import StateRepo
from tests.support.lanesproc import Child, end_process, spawn_daemon, write_config
from tests.support.net import free_port
from tests.support.sparks import sim_for_example, stop_sparks
from tests.support.storeview import lane_health
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


def git_bytes(path: Path) -> list[tuple[str, bytes]]:
    """Every object (decompressed) and every ref name and target of a repository."""
    repo = pygit2.Repository(str(path))
    objects = [(f"{path} object {oid}", repo.odb.read(oid)[1]) for oid in repo.odb]
    refs = [(f"{path} ref {name}", f"{name} {repo.references[name].target}".encode()) for name in repo.references]
    return objects + refs


def files_under(root: Path, skip: set[Path]) -> list[tuple[str, bytes]]:
    out = []
    for path in sorted(root.rglob("*")):
        if any(path == s or s in path.parents for s in skip) or not path.is_file() or path.is_symlink():
            continue
        out.append((str(path), path.read_bytes()))
    return out


def rolled_back(db: Path, lane: str) -> bool:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
        rows = conn.execute(
            "select 1 from journal where lane = ? and kind = 'rollback' and state = 'done'", (lane,)
        ).fetchall()
    return bool(rows)


def applied_since(repo: StateRepo, db: Path, commit: str) -> bool:
    """Production healthy at `commit` or a later one (the daemon's own evidence commits move the head on)."""
    health, applied = lane_health(db, PRODUCTION)
    if health != "healthy" or applied is None:
        return False
    return applied == commit or repo.repo.descendant_of(applied, commit)


def evidence_commit(repo: StateRepo, lane: str, after: str) -> bool:
    git = repo.repo
    for c in git.walk(git.references["refs/heads/main"].target):
        fields = dict(line.split(": ", 1) for line in c.message.splitlines() if ": " in line)
        target = fields.get("Evidence-For")
        if fields.get("Lane") == lane and target and (target == after or git.descendant_of(target, after)):
            return True
    return False


async def test_a_canary_secret_appears_only_in_the_hosts_env_files(tmp_path: Path) -> None:
    canary = "hf_canary_" + secrets.token_hex(16)
    env = await sim_for_example(tmp_path, 177)
    secrets_dir = env.workdir / "secrets"
    (secrets_dir / "hf-token").write_text(canary)
    repo = StateRepo(tmp_path / "forge.git", bare=True)
    quick: dict[str, dict[str, Any]] = {lane: {"bench_profile": "quick"} for lane in (EUGR, PRODUCTION)}
    first = repo.commit(fast_files(**quick), "initial fleet")
    port = free_port()
    config = write_config(tmp_path, repo.path, env, http_port=port, log_level="debug")
    config.write_text(config.read_text() + "[bench]\nenabled = true\n")
    log_path = tmp_path / "daemon.log"
    db = tmp_path / "daemon.db"
    proc: Child | None = None
    outputs: list[tuple[str, bytes]] = []  # what the daemon and the CLI answered
    try:
        proc = await spawn_daemon(config, log_path)
        await wait_for(lambda: lane_health(db, PRODUCTION) == ("healthy", first), 90, "first convergence")

        change = repo.commit(
            fast_files(**{**quick, PRODUCTION: {"bench_profile": "quick", "max_num_seqs": 4}}), "production: 4 seqs"
        )
        await wait_for(lambda: applied_since(repo, db, change), 90, "the change applied")
        await wait_for(lambda: evidence_commit(repo, PRODUCTION, change), 120, "evidence of the change")

        broken = env.fleet.registry.add(
            "aidendle94/sparkrun-sglang-dsv41-gb10:broken", env={"STANDIN_NEVER_HEALTHY": "1"}
        ).pinned
        spec = {"bench_profile": "quick", "max_num_seqs": 4, "image": broken, "health": NEVER_READY_HEALTH}
        repo.commit(
            fast_files(**{**quick, PRODUCTION: spec}),
            "production: an image that never gets healthy",
        )
        await wait_for(lambda: rolled_back(db, PRODUCTION), 90, "the rollback of the broken image")

        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            outputs += [
                (f"GET {route}", (await http.get(route)).content) for route in ("/health", "/status", "/metrics")
            ]
        for argv in (["status"], ["history", PRODUCTION]):
            run = CliRunner().invoke(app, [*argv, "--repo", str(repo.path), "--db", str(db), "--json"])
            assert run.exit_code == 0, run.output
            outputs.append((f"lanes {' '.join(argv)}", run.output.encode()))

        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
        proc = None

        # Positive control: the value was used, through 0600 env files on the production hosts.
        for host in PROD_HOSTS:
            files = env.fleet.runtime(host).envfiles
            assert any(canary in f.content and f.mode == 0o600 for f in files.values()), host

        swept = outputs + git_bytes(repo.path) + git_bytes(tmp_path / "mirror")
        # Everything else on disk: log, sqlite and its journal files, config, mirror work files.
        swept += files_under(tmp_path, skip={secrets_dir})
        assert len(swept) > 50
        assert any("daemon.db" in name for name, _ in swept)
        assert log_path.stat().st_size > 10_000, "a debug log this short means the daemon logged nothing"
        leaks = [name for name, data in swept if canary.encode() in data]
        assert leaks == []
        # The secret's name may be shown; its value never is (nor its base64 or hex forms).
        for encoded in (canary.encode().hex(), base64.b64encode(canary.encode()).decode()):
            assert [name for name, data in swept if encoded.encode() in data] == []
        assert b"hf-token" in log_path.read_bytes() or any(b"hf-token" in d for _, d in outputs + swept)
    finally:
        await end_process(proc)
        await stop_sparks(env)
        with contextlib.suppress(OSError):
            print(json.dumps({"log_bytes": log_path.stat().st_size}))
