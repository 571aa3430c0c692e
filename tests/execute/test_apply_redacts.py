"""`lanes apply` prints what the hosts said with every secret value redacted (issue 14).

The real `lanes apply` process converges a lane whose engine prints its
HF_TOKEN at start and never gets healthy, over simulated Sparks: the rollback
keeps each rank's log tail, and `--json` prints it. The token must come out
as `[redacted]` on stdout and stderr; positive control: the token was used
(it is in the hosts' env files) and the printed tail is the engine's line.
"""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

import pytest

from tests.support.example import EUGR, EUGR_HOSTS, EUGR_REPO, NEVER_READY_HEALTH, fast_files
from tests.support.gitrepo import StateRepo
from tests.support.lanesproc import run_lanes
from tests.support.world import control_world

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


async def test_lanes_apply_prints_rank_logs_with_the_secret_redacted(tmp_path: Path) -> None:
    canary = "hf_apply_canary_" + secrets.token_hex(12)
    async with control_world(tmp_path, 215) as world:
        lane_secrets = tmp_path / "lane-secrets"
        lane_secrets.mkdir()
        (lane_secrets / "hf-token").write_text(canary + "\n")
        talks = world.fleet.registry.add(
            f"{EUGR_REPO}:prints-its-token", env={"STANDIN_NEVER_HEALTHY": "1", "STANDIN_LOG_ENV": "HF_TOKEN"}
        ).pinned
        secret = [{"name": "hf-token", "env": "HF_TOKEN"}]
        files = fast_files(**{EUGR: {"image": talks, "secrets": secret, "health": NEVER_READY_HEALTH}})
        # The CLI reaches hosts at their state addresses: point them at the simulated Sparks.
        targets = world.fleet.targets
        for name, target in targets.items():
            path = f"state/hosts/{name}.yaml"
            files[path] = re.sub(rb"(?m)^address: .*$", f"address: {target.address}".encode(), files[path])
        some = next(iter(targets.values()))
        fleet = re.sub(rb"(?m)^ssh_user: .*$", f"ssh_user: {some.user}".encode(), files["state/fleet.yaml"])
        files["state/fleet.yaml"] = re.sub(rb"(?m)^ssh_port: .*$", f"ssh_port: {some.port}".encode(), fleet)
        repo = StateRepo(tmp_path / "cli-repo")
        repo.commit(files, "eugr: an engine that prints its token")
        code, out, err = await run_lanes(
            "apply", "--repo", str(repo.path), "--db", str(tmp_path / "cli.db"),
            "--known-hosts", str(world.fleet.known_hosts_path), "--ssh-key", str(world.fleet.client_key_path),
            "--secrets-dir", str(lane_secrets), "--lane", EUGR, "--yes", "--json",
        )  # fmt: skip
        assert code == 1, err
        used = [f for h in EUGR_HOSTS for f in world.fleet.runtime(h).envfiles.values() if canary in f.content]
        assert used, "the token was never used"
        results = {r["lane"]: r for r in json.loads(out)["results"]}
        tails = "".join(results[EUGR]["logs"].values())
        assert "environment: HF_TOKEN=[redacted]" in tails, tails
        assert canary not in out and canary not in err
