"""The daemon's own credentials are not lane secrets, and rank log tails are redacted before they are stored.

Issue 14. The daemon runs as a process with the unit's layout: its webhook
secret in $CREDENTIALS_DIRECTORY, the lane secrets beside it as `lane_<name>`
(what `LoadCredential=lane:/etc/lanes/lane-secrets` gives), no secrets_dir in
its settings. A commit then asks, as anyone with push access could:

- production: `secrets: [{name: webhook-secret}]`, to have the daemon write
  its HMAC key into the hosts' env files (and from there into containers);
- eugr: an image whose engine prints HF_TOKEN at start and never gets
  healthy, so its log tail, holding the lane's real secret, is kept by the
  rollback and stored in sqlite.

The webhook secret must reach no host, and the stored tail must hold
`[redacted]` where the engine printed the token. Positive control: the
token was really used (it is in eugr's 0600 env files).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import sqlite3
import sys
from pathlib import Path

import pytest

from tests.support.example import EUGR, EUGR_HOSTS, EUGR_REPO, NEVER_READY_HEALTH, PRODUCTION
from tests.support.lanesproc import Child, end_process, write_config
from tests.support.net import free_port
from tests.support.storeview import lane_health
from tests.support.waiting import wait_for
from tests.support.world import control_world

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


def stored_logs(db: Path, lane: str) -> list[str]:
    """The log tails the applies table keeps for `lane` (those that hold any)."""
    if not db.exists():
        return []
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
            rows = conn.execute("select logs from applies where lane = ?", (lane,)).fetchall()
    except sqlite3.OperationalError:
        return []
    return [r[0] for r in rows if r[0] and r[0] != "{}"]


async def test_a_lane_cannot_name_the_webhook_secret_and_log_tails_are_stored_redacted(tmp_path: Path) -> None:
    webhook = "whsec_" + secrets.token_hex(16)
    canary = "hf_canary_" + secrets.token_hex(16)
    async with control_world(tmp_path, 214) as world:
        creds = tmp_path / "credentials"
        creds.mkdir()
        (creds / "webhook-secret").write_text(webhook + "\n")
        (creds / "lane_hf-token").write_text(canary + "\n")
        (creds / "hf-token").write_text(canary + "\n")  # where a daemon without the lane namespace reads it
        talks = world.fleet.registry.add(
            f"{EUGR_REPO}:prints-its-token", env={"STANDIN_NEVER_HEALTHY": "1", "STANDIN_LOG_ENV": "HF_TOKEN"}
        ).pinned
        world.commit(
            "a lane asks for the daemon's webhook secret; another prints its token and fails",
            {
                PRODUCTION: {"secrets": [{"name": "webhook-secret", "env": "HF_TOKEN"}]},
                EUGR: {
                    "image": talks,
                    "secrets": [{"name": "hf-token", "env": "HF_TOKEN"}],
                    "health": NEVER_READY_HEALTH,
                },
            },
        )
        where = tmp_path / "daemon"
        where.mkdir()
        config = write_config(where, world.repo.path, world.env, http_port=free_port(), log_level="debug")
        text = "\n".join(
            'webhook_secret_file = "$CREDENTIALS_DIRECTORY/webhook-secret"'
            if line.startswith("webhook_secret_file")
            else line
            for line in config.read_text().splitlines()
            if not line.startswith("secrets_dir")
        )
        config.write_text(text + "\n")
        log = where / "daemon.log"
        db = where / "daemon.db"
        proc: Child | None = None
        try:
            with log.open("ab") as out:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "reconciler.cli.main", "daemon", "--config", str(config),
                    stdout=out, stderr=asyncio.subprocess.STDOUT,
                    env={**os.environ, "CREDENTIALS_DIRECTORY": str(creds)},
                )  # fmt: skip
            await wait_for(lambda: bool(stored_logs(db, EUGR)), 120, "eugr's failed ranks' log tails kept")
            settled = ("failed", "healthy")
            await wait_for(lambda: lane_health(db, PRODUCTION)[0] in settled, 60, "production settled")
        finally:
            await end_process(proc)

        # The webhook secret reached no host, in no file.
        for host in world.fleet.names:
            for name, f in world.fleet.runtime(host).envfiles.items():
                assert webhook not in f.content, (host, name)
        assert lane_health(db, PRODUCTION)[0] == "failed"
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            error = conn.execute(
                "select error from applies where lane = ? order by rowid desc", (PRODUCTION,)
            ).fetchone()
        assert error is not None and "webhook-secret" in str(error[0])

        # Positive control: eugr's token was used, and its engine printed it.
        used = [f for h in EUGR_HOSTS for f in world.fleet.runtime(h).envfiles.values() if canary in f.content]
        assert used and all(f.mode == 0o600 for f in used)
        tails = stored_logs(db, EUGR)
        assert any("environment: HF_TOKEN=[redacted]" in t for t in tails), tails
        # Nothing the daemon wrote holds either value.
        for path in sorted(where.rglob("*")):
            if path.is_file():
                data = path.read_bytes()
                assert canary.encode() not in data, path
                assert webhook.encode() not in data, path
