"""Simulated Sparks for a test: an SSH server, a docker-like runtime and engine stand-ins per host.

The fleet is wired exactly as `lanes demo` wires it (`reconciler.cli.demo.start_sim`): host keys pinned,
the example's models on the hosts, its secrets in a folder, a reconciler and a store over them. Here it
gets the test's loopback addresses and is always stopped, with no stand-in process left behind.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path

from reconciler.cli.demo import DemoEnv, start_sim, stop_demo
from reconciler.source.loadcommit import LoadedCommit
from tests.support.example import example_state, fast, loaded

__all__ = ["DemoEnv", "example_sparks", "loopback", "running_sparks", "sim_for_example", "stop_sparks"]


def worker_number() -> int:
    """This pytest-xdist worker's number (gw3: 3); 0 when the tests run in one process."""
    found = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
    return int(found.group(1)) if found else 0


def loopback(salt: int) -> str:
    """A loopback /24 for the test numbered `salt` on this worker.

    The worker's number is the second octet: the salts are chosen file by file, and files on different
    workers run side by side, so two files with the same salt once served the same addresses at once (an
    engine stand-in that could not bind its port exited, and the other file's engine answered its
    readiness check). Within one worker tests run one after another.
    """
    return f"127.{100 + worker_number() % 150}.{salt % 250}."


async def start_sparks(commit: LoadedCommit, workdir: Path, *, base_address: str) -> DemoEnv:
    """Simulated Sparks for every host of `commit`, on `base_address`N, and a reconciler wired to them."""
    return await start_sim(commit, workdir, base_address=base_address)


async def sim_for_example(tmp: Path, salt: int) -> DemoEnv:
    """Simulated Sparks for the example fleet (fast readiness timeouts), in `tmp/simwork`."""
    return await start_sparks(loaded(fast(example_state())), tmp / "simwork", base_address=loopback(salt))


async def stop_sparks(env: DemoEnv) -> None:
    await stop_demo(env)


def assert_no_standins(env: DemoEnv) -> None:
    leaked = [pid for h in env.fleet.names for pid in env.fleet.runtime(h).alive_pids()]
    assert not leaked, f"stand-in processes left running: {leaked}"


@contextlib.asynccontextmanager
async def running_sparks(commit: LoadedCommit, workdir: Path, *, base_address: str) -> AsyncIterator[DemoEnv]:
    """`start_sparks` for the length of a `with`; stopped at its end, and no stand-in outlives them."""
    env = await start_sparks(commit, workdir, base_address=base_address)
    try:
        yield env
    finally:
        await stop_sparks(env)
    assert_no_standins(env)


@contextlib.asynccontextmanager
async def example_sparks(tmp: Path, salt: int) -> AsyncIterator[DemoEnv]:
    """`sim_for_example` for the length of a `with`."""
    async with running_sparks(loaded(fast(example_state())), tmp / "simwork", base_address=loopback(salt)) as env:
        yield env
