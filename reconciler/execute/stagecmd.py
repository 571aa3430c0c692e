"""The commands of one staging transfer: rsync on the control node, or rsync on a sending host reached by `ssh -A`.

Trust is the reconciler's: its key, its known_hosts file, strict host key checking, no ~/.ssh/config
(`-F /dev/null`), no password prompt (BatchMode). A receiver reached on its data-plane address is still
checked against the key pinned for its SSH address (`HostKeyAlias`, which OpenSSH uses verbatim as the
known_hosts name, without the port: sshconnect.c get_hostfile_hostname_ipaddr, openssh-portable 9.x; so a
host on another port is pinned as `[address]:port`, as asyncssh and OpenSSH write it).

Options from ssh_config(5), OpenSSH 9.2: `HostKeyAlias` ("an alias that should be used instead of the real
host name when looking up ... the host key"), `CheckHostIP=no` (the data-plane address is in no
known_hosts), `GlobalKnownHostsFile=/dev/null` (this machine's /etc/ssh/ssh_known_hosts pins nothing for
lanes), `ServerAliveInterval`/`ServerAliveCountMax` (ssh "will disconnect after approximately"
interval x count seconds without an answer: a cut link ends the copy). The cipher is OpenSSH's default
choice: on the rig, putting AES-GCM first made no copy faster (bench/staging.py), the CPU going to rsync.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from reconciler.execute.rsync import remote_dest, rsh_string, rsync_argv
from reconciler.facts.relay_script import FILES_FROM_SLOT, KNOWN_HOSTS_SLOT, RELAY_MARKER, RELAY_SCRIPT
from reconciler.transport.base import HostTarget

CONNECT_TIMEOUT_S = 10


@dataclass(frozen=True)
class StageHost:
    """A host staging copies to or from: how to reach its sshd, its data-plane address, the model's folder."""

    name: str
    address: str
    root: str
    """The model's folder on this host."""
    port: int = 22
    user: str = "root"
    data_address: str | None = None
    """Its first data-plane address, without prefix; None when it has no data plane."""

    @property
    def target(self) -> HostTarget:
        return HostTarget(self.name, self.address, self.port, self.user)

    @property
    def pinned_name(self) -> str:
        """Its name in known_hosts: the address, or `[address]:port` off port 22."""
        return self.address if self.port == 22 else f"[{self.address}]:{self.port}"


def ssh_options(*, known_hosts: str, alias: str, port: int, io_timeout_s: int) -> list[str]:
    alive = max(1, io_timeout_s // 3)
    return [
        "-F", "/dev/null",
        "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={known_hosts}",
        "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", f"HostKeyAlias={alias}",
        "-o", "CheckHostIP=no",
        "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
        "-o", f"ServerAliveInterval={alive}",
        "-o", "ServerAliveCountMax=3",
        "-p", str(port),
    ]  # fmt: skip


def local_rsync_argv(source: str, receiver: StageHost, files_from: Path, *, key: Path, known_hosts: Path,
                     io_timeout_s: int) -> list[str]:  # fmt: skip
    """rsync on the control node pushing `source`'s listed files to the receiver's SSH address."""
    rsh = ["ssh", "-i", str(key), "-o", "IdentitiesOnly=yes",
           *ssh_options(known_hosts=str(known_hosts), alias=receiver.pinned_name, port=receiver.port,
                        io_timeout_s=io_timeout_s)]  # fmt: skip
    dest = remote_dest(receiver.user, receiver.address, receiver.root)
    return rsync_argv(source, dest, files_from=str(files_from), rsh=rsh_string(rsh), io_timeout_s=io_timeout_s)


def receiver_address(sender: StageHost, receiver: StageHost) -> str:
    """The data-plane address when both hosts have one (the hosts' own fast network), else the SSH address."""
    if sender.data_address and receiver.data_address:
        return receiver.data_address
    return receiver.address


@dataclass(frozen=True)
class RelayCommand:
    argv: list[str]
    """The control node's `ssh -A` to the sender, running the relay there."""
    stdin: str
    """The relay's request line (rsync's argv, the receiver's pinned keys, the file list)."""


def relay_command(sender: StageHost, source: str, receiver: StageHost, files: Sequence[str], *, key: Path,
                  known_hosts: Path, receiver_keys: str, io_timeout_s: int) -> RelayCommand:  # fmt: skip
    """rsync run on `sender` (through the relay script) pushing its `source` folder's files to `receiver`.

    Its ssh to the receiver logs in with the forwarded agent and checks the receiver's pinned key
    (`receiver_keys`, the lines of our known_hosts for it, in a temporary file on the sender)."""
    rsh = ["ssh", *ssh_options(known_hosts=KNOWN_HOSTS_SLOT, alias=receiver.pinned_name, port=receiver.port,
                               io_timeout_s=io_timeout_s)]  # fmt: skip
    dest = remote_dest(receiver.user, receiver_address(sender, receiver), receiver.root)
    rsync = rsync_argv(source, dest, files_from=FILES_FROM_SLOT, rsh=rsh_string(rsh), io_timeout_s=io_timeout_s)
    request = json.dumps({"argv": rsync, "known_hosts": receiver_keys, "files": list(files)}) + "\n"
    outer = ["ssh", "-A", "-i", str(key), "-o", "IdentitiesOnly=yes",
             *ssh_options(known_hosts=str(known_hosts), alias=sender.pinned_name, port=sender.port,
                          io_timeout_s=io_timeout_s),
             "-l", sender.user, "--", sender.address,
             shlex.join(["python3", "-I", "-c", RELAY_SCRIPT, RELAY_MARKER])]  # fmt: skip
    return RelayCommand(outer, request)


def pinned_lines(keygen_output: str) -> str:
    """The known_hosts lines `ssh-keygen -F NAME` printed (its '# Host ... found' comments dropped)."""
    lines = [line for line in keygen_output.splitlines() if line.strip() and not line.startswith("#")]
    return "".join(line + "\n" for line in lines)


def keygen_find_argv(name: str, known_hosts: Path) -> list[str]:
    """OpenSSH's own lookup (hashed names, markers): `ssh-keygen -F hostname -f file`, ssh-keygen(1)."""
    return ["ssh-keygen", "-F", name, "-f", str(known_hosts)]


def local_env() -> dict[str, str]:
    """rsync's environment on the control node: C locale, and no agent of whoever started lanes."""
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "SSH_AGENT_PID")}
    env["LC_ALL"] = "C"
    return env
