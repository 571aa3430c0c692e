"""A world for staging tests without sshd: every "host" is a folder here, and `ssh` a stand-in on PATH.

The stand-in `ssh` takes OpenSSH's options, logs its argv (and, with -A, the keys of the agent it would
forward: `ssh-add -l` on SSH_AUTH_SOCK) as one JSON line, then runs the remote command locally with
`sh -c`, as sshd would: in a session of its own, its stdio carried through the stand-in, so killing the
stand-in reaches the command only as EOF and a broken pipe. So rsync, the relay script, the model check,
ssh-agent and ssh-add are the real programs; only the network hop is skipped. The rig
(`tests/rig/test_staging.py`) does the same over real sshd in separate namespaces.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.execute.stagecmd import StageHost
from reconciler.facts.modelcheck import modelcheck_argv
from reconciler.facts.relay_script import RELAY_MARKER
from reconciler.transport.base import CommandResult, HostTarget
from reconciler.transport.local import LocalTransport

FAKE_SSH = r"""#!@PYTHON@
import json, os, subprocess, sys, threading, time
WITH_ARG = set("BbcDEeFIiJLlmOopQRSWw")
args = sys.argv[1:]
i = 0
while i < len(args) and args[i].startswith("-") and args[i] != "--":
    flag = args[i]
    i += 2 if (len(flag) == 2 and flag[1] in WITH_ARG) else 1
if i < len(args) and args[i] == "--":  # as OpenSSH's getopt: `--` ends the options, the destination follows
    i += 1
host = args[i]
rest = args[i + 1:]
if rest and rest[0] == "--":
    rest = rest[1:]
entry = {"argv": sys.argv[1:], "host": host, "pid": os.getpid()}
if "-A" in args[:i]:
    keys = subprocess.run(["ssh-add", "-l"], stdout=subprocess.PIPE, universal_newlines=True)
    entry["agent_keys"] = keys.stdout.strip().splitlines()
    entry["sock"] = os.environ.get("SSH_AUTH_SOCK", "")
with open(os.environ["FAKE_SSH_LOG"], "a") as log:
    log.write(json.dumps(entry) + "\n")
hang = os.environ.get("FAKE_SSH_HANG", "")
if hang and hang in " ".join(rest):
    time.sleep(3600)
# As sshd runs it: the command in a session of its own, its stdio carried through this process. So a signal
# to our process group never reaches the command, and our death is seen there as sshd's closing of the
# channel: EOF on stdin, a broken pipe on stdout.
child = subprocess.Popen(["sh", "-c", " ".join(rest)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)


def pump(src, dst, close):
    try:
        while True:
            data = memoryview(os.read(src, 65536))
            if not data:
                break
            while data:
                data = data[os.write(dst, data):]
    except OSError:
        pass
    if close:
        os.close(dst)


threading.Thread(target=pump, args=(0, child.stdin.fileno(), True), daemon=True).start()
outs = [threading.Thread(target=pump, args=(child.stdout.fileno(), 1, False)),
        threading.Thread(target=pump, args=(child.stderr.fileno(), 2, False))]
for t in outs:
    t.start()
code = child.wait()
for t in outs:
    t.join()
os._exit(code if code >= 0 else 255)  # a command killed by a signal: ssh's 255 (no exit-status came)
"""


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Entry:
    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    files: tuple[Entry, ...]

    @property
    def total(self) -> int:
        return sum(f.size for f in self.files)


def manifest_of(files: Mapping[str, bytes]) -> Manifest:
    return Manifest(tuple(Entry(p, len(d), sha(d)) for p, d in sorted(files.items())))


def write_tree(root: Path, files: Mapping[str, bytes]) -> None:
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)


def tree_digest(root: Path, paths: list[str]) -> dict[str, str]:
    return {p: sha((root / p).read_bytes()) for p in paths if (root / p).is_file()}


class Staging:
    """Folders as hosts, a key and known_hosts, the stand-in ssh on PATH and its log."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.bin = tmp / "bin"
        self.bin.mkdir()
        ssh = self.bin / "ssh"
        ssh.write_text(FAKE_SSH.replace("@PYTHON@", sys.executable))
        ssh.chmod(0o755)
        self.log = tmp / "ssh.log"
        self.key = tmp / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "lanes-test", "-f", str(self.key)],
                       check=True, timeout=30)  # fmt: skip
        self.known_hosts = tmp / "known_hosts"
        self.hosts: dict[str, StageHost] = {}

    def env(self) -> dict[str, str]:
        return {"PATH": f"{self.bin}:{os.environ['PATH']}", "FAKE_SSH_LOG": str(self.log)}

    def host(self, name: str, index: int, *, data_plane: bool = True) -> StageHost:
        """A host whose model folder is tmp/<name>/models/m, pinned in known_hosts under its address."""
        address = f"10.99.0.{index}"
        host = StageHost(name=name, address=address, root=str(self.tmp / name / "models" / "m"),
                         data_address=f"10.98.0.{index}" if data_plane else None)  # fmt: skip
        (self.tmp / name).mkdir()
        pub = self.key.with_suffix(".pub").read_text().split()
        with self.known_hosts.open("a") as f:
            f.write(f"{address} {pub[0]} {pub[1]}\n")
        self.hosts[name] = host
        return host

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def root(self, name: str) -> Path:
        return Path(self.hosts[name].root)


class SmallDisk(LocalTransport):
    """The local transport, with the model check reporting `free` bytes on the hosts named (a small disk)."""

    def __init__(self, free: Mapping[str, int]) -> None:
        super().__init__()
        self.free = dict(free)
        self.checks: list[str] = []

    async def run(self, host: HostTarget, argv: Sequence[str], *, input: str | None = None, timeout: float = 30.0,
                  check: bool = True) -> CommandResult:  # fmt: skip
        result = await super().run(host, list(argv), input=input, timeout=timeout, check=check)
        if list(argv) == modelcheck_argv():
            self.checks.append(host.name)
            if host.name in self.free:
                data = json.loads(result.stdout)
                data["free_bytes"] = self.free[host.name]
                return CommandResult(result.host, result.argv, result.exit_status, json.dumps(data), result.stderr,
                                     result.duration_s)  # fmt: skip
        return result


def rsync_missing() -> bool:
    return shutil.which("rsync") is None


def gone(path: str | Path) -> bool:
    """Nothing at `path` (a process's /proc entry: gone or a zombie waiting to be reaped)."""
    p = Path(path)
    if not p.exists():
        return True
    status = p / "status"
    return status.exists() and "zombie" in status.read_text().lower()


def relay_processes(log: Path) -> list[str]:
    """Command lines of this world's relay scripts or rsyncs still running (told apart from any other test's by
    the stand-in ssh's log in their environment)."""
    mine = f"FAKE_SSH_LOG={log}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if (RELAY_MARKER in cmd or cmd.startswith("rsync ")) and mine in env and not gone(entry):
            found.append(cmd[:200])
    return found
