"""A private ssh-agent for one staging run: host-to-host copies log in with the reconciler's key, which never
leaves the control node.

When a Spark or an origin host sends model files to a Spark, rsync runs on the sender and its ssh must log
in to the receiver. Instead of copying the key there, the control node reaches the sender with `ssh -A`
(agent forwarding) to an agent of its own: started for this run on a socket in a fresh 0700 folder
(`ssh-agent -D -a SOCKET`: "Foreground mode ... will not fork", "-a bind_address: bind the agent to the
UNIX-domain socket", ssh-agent(1), OpenSSH 9.x), holding only the reconciler's key, added with a lifetime
(`ssh-add -t life`: "Set a maximum lifetime when adding identities to an agent", ssh-add(1)), and killed
when the run ends. Anyone able to use the forwarded socket on a sender (root there) can log in with the
key while the run lasts, no longer: the same trust the reconciler already gives those hosts' root.
The caller's own agent (SSH_AUTH_SOCK) is never used or forwarded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from reconciler.errors import PermanentError
from reconciler.execute.subproc import SubprocessTimeoutError, kill_group, run_streaming, start_group

START_TIMEOUT_S = 10.0


def agent_env(socket: str) -> dict[str, str]:
    """The environment of a program that must use (and forward, with -A) only this agent."""
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "SSH_AGENT_PID")}
    env["SSH_AUTH_SOCK"] = socket
    return env


@contextlib.asynccontextmanager
async def private_agent(key: Path, *, lifetime_s: int) -> AsyncIterator[str]:
    """Yield the socket of an agent holding only `key` for at most `lifetime_s`; kill it and its folder after."""
    folder = Path(tempfile.mkdtemp(prefix="lanes-agent-"))  # mkdtemp: mode 0700, ours alone
    socket = str(folder / "agent.sock")
    proc = await start_group(["ssh-agent", "-D", "-a", socket], stdin=asyncio.subprocess.DEVNULL,
                             stdout=asyncio.subprocess.DEVNULL)  # fmt: skip
    try:
        await _socket_made(proc, socket)
        try:
            added = await run_streaming(["ssh-add", "-q", "-t", str(lifetime_s), str(key)], timeout=START_TIMEOUT_S,
                                        env=agent_env(socket))  # fmt: skip
        except SubprocessTimeoutError as exc:
            raise PermanentError(f"ssh-add {key}: {exc} (a key with a passphrase cannot be used)") from None
        if added.returncode != 0:
            raise PermanentError(f"ssh-add {key}: exit {added.returncode}: {added.stderr.strip()}")
        yield socket
    finally:
        await kill_group(proc)
        shutil.rmtree(folder, ignore_errors=True)


async def _socket_made(proc: asyncio.subprocess.Process, socket: str) -> None:
    deadline = asyncio.get_running_loop().time() + START_TIMEOUT_S
    while not await asyncio.to_thread(os.path.exists, socket):
        if proc.returncode is not None:
            err = (await proc.stderr.read()).decode(errors="replace").strip() if proc.stderr else ""
            raise PermanentError(f"ssh-agent exited at start (exit {proc.returncode}): {err}")
        if asyncio.get_running_loop().time() > deadline:
            raise PermanentError(f"ssh-agent did not make its socket within {START_TIMEOUT_S:g} s")
        await asyncio.sleep(0.02)
