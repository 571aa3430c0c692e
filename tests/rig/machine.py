"""The machine under the rig: packages, podman configuration, processes, links and leftovers.

The rig changes this machine as root (a containers.conf, a registries.conf.d
file, network namespaces, veths and a bridge, podman stores, daemons), so
everything here is undoable and named with the rig's prefix: `cleanup_stale`
finds what a crashed run left by that prefix and removes it, and processes
are only ever stopped by their id after checking their command line.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

PREFIX = "lanesrig"
"""Prefix of every name the rig makes: namespaces, the rig folder, the registries.conf.d file."""
LINK_PREFIX = "lrig"
"""Interface names are limited to 15 characters: `lrig<pid>b` and `lrig<pid>d` (bridges), `lrig<pid>h<i>` and
`lrig<pid>d<i>` (veths)."""

SUBNET = "10.213.47"
"""The control plane: each host's SSH address, the registry, the control node (the root namespace)."""
FABRIC_SUBNET = "10.214.47"
"""The data plane: each host's second interface (`eth1`), on a bridge of its own the control node is not on,
as the ConnectX-7 switch of a Spark fleet. It has no RDMA device, so ranks use NCCL's socket transport."""
FABRIC_INTERFACE = "eth1"
ROOT_ADDRESS = f"{SUBNET}.1"
REGISTRY_PORT = 5000
REGISTRY = f"{ROOT_ADDRESS}:{REGISTRY_PORT}"
HOST_NAMES = ("rig1", "rig2", "rig3", "rig4")
IMAGE_REPO = "lanes/standin"
ENGINE_PORT = 8000

PACKAGES = {  # binary -> Debian package
    "/usr/sbin/sshd": "openssh-server",
    "/usr/bin/podman": "podman",
    "/usr/sbin/runc": "runc",
    "/usr/bin/docker-registry": "docker-registry",
    "/usr/bin/skopeo": "skopeo",
    "/usr/sbin/ip": "iproute2",
    "/usr/bin/rsync": "rsync",  # staging model files (tests/rig/test_staging.py)
}

CONTAINERS_CONF = Path("/etc/containers/containers.conf")
CONTAINERS_CONF_BACKUP = Path(f"/etc/containers/containers.conf.{PREFIX}-backup")
CONTAINERS_CONF_TEXT = """\
# Written by the lanes integration rig (tests/rig); restored when the rig stops.
# crun fails here (cgroups in hybrid mode); default ulimits need CAP_SYS_RESOURCE.
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""
REGISTRIES_CONF = Path(f"/etc/containers/registries.conf.d/50-{PREFIX}.conf")
NO_CONF_MARK = "# none"
"""Content of the backup file when there was no containers.conf to restore."""

LANES_ENV = {**os.environ, "NO_COLOR": "1", "COLUMNS": "300", "TERM": "dumb"}
"""One progress event per line (rich wraps at the terminal width otherwise)."""

STANDIN_ARGS = ("python3", "-m", "reconciler.sim.standin")

# The `docker` every host has on its PATH: podman on that host's own store, picked by the
# RIG_HOST variable its sshd sets. podman 4.3 has no --gpus; on a Spark the NVIDIA runtime
# consumes it, here there is no GPU, so it is dropped. `ps --format '{{json .}}'` is printed
# the way docker prints it. Every invocation is logged so a test can tell that nothing ran on a host.
DOCKER_WRAPPER = r"""#!/usr/bin/python3 -I
import json, os, subprocess, sys, time
RIG = @RIG@
host = os.environ.get("RIG_HOST", "")
if not host or "/" in host or not os.path.isdir(os.path.join(RIG, "hosts", host)):
    sys.stderr.write("docker (lanes rig): RIG_HOST is not a rig host: %r\n" % host)
    sys.exit(125)
base = os.path.join(RIG, "hosts", host)
args = sys.argv[1:]
with open(os.path.join(base, "docker.log"), "a") as log:
    log.write(json.dumps({"t": time.time(), "argv": args}) + "\n")
BOOL = {"-d", "--detach", "--rm", "-i", "-t", "-it", "--privileged", "--init", "--read-only", "-q", "--quiet"}
if args and args[0] == "run":
    out, i, rest = ["run"], 1, []
    while i < len(args):
        a = args[i]
        if a == "--" or not a.startswith("-"):
            rest = args[i:]
            break
        if a.startswith("--gpus="):
            i += 1
            continue
        if a == "--gpus":
            i += 2
            continue
        if a in BOOL or "=" in a:
            out.append(a)
            i += 1
            continue
        out += args[i:i + 2]
        i += 2
    args = out + rest
podman = ["podman", "--root", base + "/storage", "--runroot", base + "/run", "--tmpdir", base + "/tmp",
          "--events-backend", "file"]
# docker prints `ps --format '{{json .}}'` as one object per line; podman 4.3 prints one JSON array.
if args and args[0] == "ps" and ("{{json .}}" in args or "--format={{json .}}" in args):
    args = ["--format=json" if a == "--format={{json .}}" else ("json" if a == "{{json .}}" else a) for a in args]
    p = subprocess.run(podman + args, stdout=subprocess.PIPE, universal_newlines=True)
    for item in json.loads(p.stdout or "[]") if p.returncode == 0 else []:
        print(json.dumps(item))
    sys.exit(p.returncode)
os.execv("/usr/bin/podman", podman + args)
"""


class RigError(RuntimeError):
    """The rig could not be built or driven; the message says which step."""


def sh(
    argv: Sequence[str],
    *,
    check: bool = True,
    timeout: float = 120.0,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a local command; on failure raise with the argv and the tail of its stderr."""
    result = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=dict(env) if env is not None else None,
        input=input,
        cwd=cwd,
    )
    if check and result.returncode != 0:
        raise RigError(f"{shlex.join(argv)}: exit {result.returncode}: {result.stderr.strip()[-2000:]}")
    return result


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: fields start after the last ')'.
        fields = stat.rsplit(")", 1)[1].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            kids.append(int(entry.name))
    return kids


def process_identity(pid: int) -> str:
    """`PID STARTTIME`: names one process for good (a pid alone may be reused after a crash)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return f"{pid} {stat.rsplit(')', 1)[1].split()[19]}"


def process_cmdlines() -> dict[int, str]:
    """pid -> command line of every live process on this machine (the rig's hosts share its pids)."""
    cmdlines = {int(entry.name): _cmdline(int(entry.name)) for entry in Path("/proc").iterdir() if entry.name.isdigit()}
    return {pid: cmd for pid, cmd in cmdlines.items() if cmd}  # a zombie's is empty


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def stop_pid(pid: int, *, must_contain: str, timeout: float = 5.0) -> None:
    """SIGTERM one process the rig started (and its children: sshd's per-connection processes), then SIGKILL.

    `must_contain` guards against a recycled pid: the process's command line must mention it.
    """
    if not pid_alive(pid) or must_contain not in _cmdline(pid):
        return
    victims = [pid, *_children(pid)]
    for victim in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(pid_alive(v) and _cmdline(v) for v in victims):
        time.sleep(0.05)
    for victim in victims:
        if pid_alive(victim) and _cmdline(victim):
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)


def ensure_packages() -> None:
    """Install the Debian packages the rig needs, only when one of their binaries is missing."""
    missing = sorted({pkg for binary, pkg in PACKAGES.items() if not Path(binary).exists()})
    if not missing:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    sh(["apt-get", "update", "-q"], env=env, timeout=300)
    sh(["apt-get", "install", "-y", "-q", *PACKAGES.values()], env=env, timeout=600)


def rig_unavailable_reason() -> str | None:
    """Why the rig cannot run here at all, or None (namespaces are checked once iproute2 is there)."""
    if os.geteuid() != 0:
        return "the rig tier needs root (network namespaces, sshd, podman stores)"
    if shutil.which("apt-get") is None and any(not Path(b).exists() for b in PACKAGES):
        return "the rig tier needs Debian packages (openssh-server, podman, ...) and there is no apt-get"
    return None


def netns_reason() -> str | None:
    """Whether `ip netns` works here (namespaces need CAP_SYS_ADMIN and a mountable /run/netns)."""
    probe = f"{PREFIX}-probe-{os.getpid()}"
    made = sh(["ip", "netns", "add", probe], check=False)
    if made.returncode != 0:
        return f"`ip netns add` is unavailable here: {made.stderr.strip()}"
    sh(["ip", "netns", "delete", probe], check=False)
    return None


def install_podman_conf() -> None:
    """containers.conf as RIG.md says (runc, cgroupfs, no default ulimits); the original is kept aside."""
    CONTAINERS_CONF.parent.mkdir(parents=True, exist_ok=True)
    if not CONTAINERS_CONF_BACKUP.exists():
        original = CONTAINERS_CONF.read_text() if CONTAINERS_CONF.exists() else NO_CONF_MARK
        CONTAINERS_CONF_BACKUP.write_text(original)
    CONTAINERS_CONF.write_text(CONTAINERS_CONF_TEXT)
    REGISTRIES_CONF.parent.mkdir(parents=True, exist_ok=True)
    REGISTRIES_CONF.write_text(
        "# The lanes integration rig's registry (plain HTTP); removed when the rig stops.\n"
        f'[[registry]]\nlocation = "{REGISTRY}"\ninsecure = true\n'
    )


def restore_podman_conf() -> None:
    if CONTAINERS_CONF_BACKUP.exists():
        original = CONTAINERS_CONF_BACKUP.read_text()
        if original == NO_CONF_MARK:
            CONTAINERS_CONF.unlink(missing_ok=True)
        else:
            CONTAINERS_CONF.write_text(original)
        CONTAINERS_CONF_BACKUP.unlink()
    REGISTRIES_CONF.unlink(missing_ok=True)


def _mounts_under(folder: Path) -> list[str]:
    prefix = str(folder) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point.startswith(prefix) or point == str(folder):
            points.append(point)
    return sorted(points, key=len, reverse=True)


def podman_local(
    store: Path, *args: str, check: bool = True, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """podman on one of the rig's stores, from the root namespace."""
    return sh(
        [
            "podman",
            "--root",
            str(store / "storage"),
            "--runroot",
            str(store / "run"),
            "--tmpdir",
            str(store / "tmp"),
            "--events-backend",
            "file",
            *args,
        ],
        check=check,
        timeout=timeout,
    )


def remove_rig_dir(folder: Path) -> None:
    """Remove a rig folder: containers and images of every store first, then podman's mounts, then files."""
    stores = [p.parent for p in folder.glob("*/*/storage")] + [p.parent for p in folder.glob("*/storage")]
    for store in stores:
        podman_local(store, "rm", "-af", "-t", "0", check=False)
        podman_local(store, "rmi", "-af", check=False)
    for point in _mounts_under(folder):
        sh(["umount", "-l", point], check=False)
    shutil.rmtree(folder, ignore_errors=True)


def cleanup_stale() -> None:
    """Remove what rigs whose pytest process is gone left behind: processes, stores, links, namespaces."""
    base = Path(tempfile.gettempdir())
    for folder in base.glob(f"{PREFIX}-*"):
        owner = (folder / "owner").read_text().strip() if (folder / "owner").exists() else ""
        if owner and owner != process_identity(os.getpid()) and process_identity(int(owner.split()[0])) == owner:
            raise RigError(
                f"another rig ({folder}, process {owner.split()[0]}) is running: its subnet {SUBNET}.0/24 is taken"
            )
        for pidfile in [folder / "registry.pid", *folder.glob("hosts/*/sshd.pid")]:
            if not pidfile.exists():
                continue
            with contextlib.suppress(ValueError, OSError):
                stop_pid(int(pidfile.read_text().split()[0]), must_contain=str(folder))
        remove_rig_dir(folder)
    for line in sh(["ip", "netns", "list"], check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(f"{PREFIX}-"):
            sh(["ip", "netns", "delete", name], check=False)
    links = sh(["ip", "-o", "link", "show"], check=False).stdout
    for line in links.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            dev = parts[1].strip().split("@")[0]
            if dev.startswith(LINK_PREFIX) and dev[len(LINK_PREFIX) : len(LINK_PREFIX) + 1].isdigit():
                sh(["ip", "link", "delete", dev], check=False)
    restore_podman_conf()


def delete_link(dev: str) -> None:
    # Deleting a namespace destroys the veth pair with it (asynchronously): a missing device is done.
    result = sh(["ip", "link", "delete", dev], check=False)
    if result.returncode != 0 and "Cannot find device" not in result.stderr:
        raise RigError(f"ip link delete {dev}: {result.stderr.strip()}")
