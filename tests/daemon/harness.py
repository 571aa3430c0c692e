"""A state repo, simulated Sparks and a daemon config that points the one at the other."""

from __future__ import annotations

import asyncio
import contextlib
import io
import socket
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pygit2
from ruamel.yaml import YAML

from reconciler.cli.demo import DemoEnv, start_sim
from reconciler.source.loadcommit import LoadedCommit
from reconciler.spec.load import DesiredState
from tests.execute.conftest import fast
from tests.support.example import EUGR, PRODUCTION, example_policies, example_state, repo_files
from tests.support.gitrepo import SIGNATURE

LANE_DIR = "state/lanes"
PROD_HOSTS = ("dgx1", "dgx2", "dgx3", "dgx4")  # where the example fleet runs PRODUCTION
EUGR_HOSTS = ("dgx5", "dgx6", "dgx7")  # and EUGR


def lane_yaml(state: DesiredState, name: str, **changes: Any) -> bytes:
    data = state.lanes[name].model_dump(mode="json", exclude={"name"})
    data.update(changes)
    out = io.StringIO()
    yaml = YAML()  # round-trip style, block layout: what a person's file looks like
    yaml.default_flow_style = False
    yaml.width = 4096  # long image references stay on one line, as people write them
    yaml.dump({k: v for k, v in data.items() if v is not None}, out)
    return out.getvalue().encode("utf-8")


def fast_files(**lane_changes: dict[str, Any]) -> dict[str, bytes]:
    """The example state with fast readiness timeouts on the running lanes (and changes per lane)."""
    state = fast(example_state())
    files = repo_files()
    for name in state.lanes:
        files[f"{LANE_DIR}/{name}.yaml"] = lane_yaml(state, name, **lane_changes.get(name, {}))
    return files


class StateRepo:
    def __init__(self, path: Path, *, bare: bool = False) -> None:
        self.path = path
        self.repo = pygit2.init_repository(str(path), bare=bare, initial_head="main")

    def commit(
        self,
        files: dict[str, bytes],
        message: str = "change lanes",
        *,
        parents: list[str] | None = None,
        ref: str = "refs/heads/main",
    ) -> str:
        index = pygit2.Index()
        for p, data in sorted(files.items()):
            index.add(pygit2.IndexEntry(p, self.repo.create_blob(data), pygit2.enums.FileMode.BLOB))
        tree = index.write_tree(self.repo)
        if parents is None:
            parents = [] if self.repo.head_is_unborn else [str(self.repo.head.target)]
        oid = self.repo.create_commit(None, SIGNATURE, SIGNATURE, message, tree, parents)
        self.repo.references.create(ref, oid, force=True)
        return str(oid)

    def head(self) -> str:
        return str(self.repo.head.target)


async def spawn_daemon(config: Path, log: Path) -> asyncio.subprocess.Process:
    """`lanes daemon --config` as a real process; its JSON log lines (stdout) and stderr go to `log`."""
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "reconciler.cli.main", "daemon", "--config", str(config),
            stdout=out, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip


async def run_lanes(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """The real `lanes` command as a process (never blocking the loop: simulated hosts may run on it)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "reconciler.cli.main", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(
    tmp: Path, repo: Path, env: DemoEnv, *, http_port: int, extra: str = "", resync_s: float = 300, fetch_s: float = 30
) -> Path:
    hosts = "\n".join(
        f'[hosts.{name}]\naddress = "{t.address}"\nport = {t.port}\nuser = "{t.user}"\n'
        for name, t in env.fleet.targets.items()
    )
    text = f'''[repo]
url = "{repo}"
branch = "main"
mirror_dir = "{tmp / "mirror"}"
fetch_interval_s = {fetch_s}
resync_interval_s = {resync_s}
{extra}
[ssh]
key = "{env.fleet.client_key_path}"
known_hosts = "{env.fleet.known_hosts_path}"
[daemon]
owner = "lanes-test"
db = "{tmp / "daemon.db"}"
secrets_dir = "{env.workdir / "secrets"}"
log_level = "warning"
[http]
listen = "127.0.0.1:{http_port}"
webhook_secret_file = "{tmp / "webhook-secret"}"
{hosts}'''
    (tmp / "webhook-secret").write_text("s3cret-for-tests\n")
    path = tmp / "reconciler.toml"
    path.write_text(text)
    return path


async def sim_for_example(tmp: Path, salt: int) -> DemoEnv:
    state = fast(example_state())
    return await start_sim(
        LoadedCommit(state.commit, state, example_policies()),
        tmp / "simwork",
        base_address=f"127.{30 + salt % 20}.{salt % 250}.",
    )


async def wait_for(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> float:
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)
    return time.monotonic() - t0


def lane_health(db: Path, lane: str) -> tuple[str | None, str | None]:
    """Read the daemon's lane record without writing to its database (read-only connection)."""
    if not db.exists():
        return None, None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
            row = conn.execute("select health, applied_commit from lanes where name = ?", (lane,)).fetchone()
    except sqlite3.OperationalError:
        return None, None
    return (row[0], row[1]) if row else (None, None)


__all__ = ["EUGR", "PRODUCTION"]
