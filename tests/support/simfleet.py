"""A small state repository whose hosts are simulated Sparks, for driving `lanes plan`/`apply` as a person does.

Two single-host vLLM lanes on spark1 and spark2 (spark3 spare), readiness timeouts short enough for a
test; `wide`, the first lane spans spark1 and spark3 (a rank on each). The simulated hosts are started
as `lanes demo` starts them (`start_sim`); the repository's host files then point at their loopback
addresses, so the real CLI reaches them over SSH with pinned keys.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pygit2

from reconciler.source.loadcommit import load_commit
from tests.support.gitrepo import commit_files, make_repo
from tests.support.lanesproc import run_lanes
from tests.support.sparks import DemoEnv, running_sparks

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ("spark1", "spark2", "spark3")
QWEN, SMALL = "qwen-a", "qwen-b"
LANE_HOSTS = {QWEN: "spark1", SMALL: "spark2"}
WIDE_HOST = "spark3"
"""QWEN's second host when the fleet is `wide`."""
HEALTH = (
    "health:\n  port_timeout_s: 20\n  ready_timeout_s: 20\n  models_timeout_s: 10\n"
    "  completion_timeout_s: 10\n  poll_interval_s: 0.2\n"
)


def state_files(
    addresses: dict[str, str], port: int, user: str, seqs: int = 8, *, wide: bool = False
) -> dict[str, bytes]:
    """The repository's files; `wide`: QWEN spans spark1 and spark3 (tp 2, one rank each, over a data plane)."""
    files = {
        f"policies/{p.name}": p.read_bytes() for p in (ROOT / "reconciler" / "scaffold" / "policies").glob("*.yaml")
    }
    files["state/fleet.yaml"] = f"ssh_user: {user}\nssh_port: {port}\nhf_cache: /root/.cache/huggingface\n".encode()
    for i, name in enumerate(HOSTS):
        files[f"state/hosts/{name}.yaml"] = f"address: {addresses[name]}\n".encode()
        if wide:  # a multi-node lane's ranks meet over the data plane only; the sim brings these links up
            files[f"state/hosts/{name}.yaml"] += (
                f"data_plane: [{{interface: enp1s0f0np0, address: 192.168.100.{21 + i}/24, hca: rocep1s0f0}}]\n"
            ).encode()
    files["state/models/qwen.yaml"] = (
        b'hf_repo: Qwen/Qwen3-8B\nrevision: "' + b"0" * 40 + b'"\npath: /srv/models/qwen\nweight_bytes: 16000000000\n'
        b"architecture:\n  layers: 36\n  attention: gqa\n  num_heads: 32\n  kv_heads: 8\n  head_dim: 128\n"
    )
    for lane, host in LANE_HOSTS.items():
        hosts, tp = (f"{host}, {WIDE_HOST}", 2) if wide and lane == QWEN else (host, 1)
        files[f"state/lanes/{lane}.yaml"] = (
            f"engine: vllm\nengine_version: 0.32.0\nimage: vllm/vllm-openai@sha256:{'1' * 64}\nmodel: qwen\n"
            f"served_model_name: {lane}\nhosts: [{hosts}]\ntp: {tp}\nmax_model_len: 32768\n"
            f"gpu_memory_utilization: 0.5\nport: 8000\nmax_num_seqs: {seqs if lane == QWEN else 8}\n{HEALTH}"
        ).encode()
    return files


@dataclass
class SimFleet:
    env: DemoEnv
    repo: Path
    db: Path
    wide: bool = False

    def files(self, seqs: int = 8, addresses: dict[str, str] | None = None) -> dict[str, bytes]:
        targets = self.env.fleet.targets
        user, port = targets["spark1"].user, targets["spark1"].port
        return state_files(addresses or {n: t.address for n, t in targets.items()}, port, user, seqs, wide=self.wide)

    def commit(self, files: dict[str, bytes], message: str) -> str:
        return commit_files(pygit2.Repository(str(self.repo)), files, message)

    def connect(self) -> list[str]:
        return [
            "--repo", str(self.repo), "--db", str(self.db),
            "--known-hosts", str(self.env.fleet.known_hosts_path), "--ssh-key", str(self.env.fleet.client_key_path),
            "--secrets-dir", str(self.env.workdir / "secrets"),
        ]  # fmt: skip

    async def lanes(self, *args: str, columns: int | None = None) -> tuple[int, str, str]:
        """`lanes ARGS` in a pipe: no COLUMNS unless given (what a script or `| less` gets)."""
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        if columns is not None:
            env["COLUMNS"] = str(columns)
        return await run_lanes(*args, env=env)


@contextlib.asynccontextmanager
async def sim_fleet(tmp: Path, base_address: str, *, wide: bool = False) -> AsyncIterator[SimFleet]:
    placeholder = make_repo(tmp / "placeholder", state_files(dict.fromkeys(HOSTS, "192.0.2.1"), 22, "root", wide=wide))
    async with running_sparks(load_commit(placeholder), tmp / "sim", base_address=base_address) as env:
        fleet = SimFleet(env, tmp / "repo", tmp / "lanes.db", wide)
        make_repo(fleet.repo, fleet.files())
        yield fleet
