"""The integration rig: four Spark stand-ins on this machine, as real as the GPU allows.

Each host is a network namespace with its own address on the rig's private
/24, its own OpenSSH sshd (own host key, an authorized key the rig made) and
its own podman store behind a `docker` command; a real distribution registry
in the root namespace serves the engine stand-in image, which hosts pull by
digest. lanes reaches all of it exactly as it reaches Sparks: over SSH with
pinned host keys, `docker` argv lists, HTTP to each host's address.

Everything the rig makes is named after its id (`lanesrig-<pid>`), started
and stopped by process id, and removed by `Rig.teardown`, which tolerates a
half-built rig; `cleanup_stale` removes what a crashed earlier rig left.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.rig.lanescli import LaneRun, run_lanes, run_lanes_watching
from tests.rig.machine import (
    DOCKER_WRAPPER,
    FABRIC_INTERFACE,
    FABRIC_SUBNET,
    HOST_NAMES,
    LINK_PREFIX,
    PREFIX,
    ROOT_ADDRESS,
    SUBNET,
    RigError,
    cleanup_stale,
    delete_link,
    ensure_packages,
    install_podman_conf,
    pid_alive,
    podman_local,
    process_identity,
    remove_rig_dir,
    restore_podman_conf,
    sh,
    stop_pid,
)
from tests.rig.registry import Images, Registry
from tests.rig.staterepo import StateRepo, lane_body

REPO = Path(__file__).resolve().parents[2]

INSPECT_ALL = 'ids=$(docker ps -aq) && if [ -n "$ids" ]; then docker inspect $ids; else echo "[]"; fi'
"""A constant script (no field of ours in it): inspect every container of a host."""


@dataclass
class RigHost:
    name: str
    index: int
    address: str
    netns: str
    veth: str
    folder: Path
    fabric_address: str = ""
    """The host's data-plane address (FABRIC_INTERFACE), without prefix."""
    fabric_veth: str = ""
    ssh_pid: int | None = None
    hidden: Path | None = None
    """A folder this host's sshd sees as empty (its own mount namespace): see `Rig.hide_on`."""

    @property
    def config(self) -> Path:
        return self.folder / "sshd_config"

    @property
    def pidfile(self) -> Path:
        return self.folder / "sshd.pid"

    @property
    def hostkey(self) -> Path:
        return self.folder / "ssh_host_ed25519_key"

    @property
    def docker_log(self) -> Path:
        return self.folder / "docker.log"

    @property
    def authorized_keys(self) -> Path:
        """This host's own authorized_keys (a host can refuse our key while the others accept it)."""
        return self.folder / "authorized_keys"

    @property
    def sshd_log(self) -> Path:
        return self.folder / "sshd.log"


@dataclass
class Rig:
    rig_id: str = field(default_factory=lambda: f"{PREFIX}-{os.getpid()}")
    folder: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / f"{PREFIX}-{os.getpid()}")
    hosts: dict[str, RigHost] = field(default_factory=dict)
    images: Images | None = None
    engine_images: dict[str, str] = field(default_factory=dict)
    """Engine images with a parser of their own, by tag, pushed on first use (`engine_image`)."""
    registry: Registry | None = None
    timings: dict[str, float] = field(default_factory=dict)
    db_name: str = "main"
    _made_bridge: bool = False
    _made_fabric: bool = False
    _conf_installed: bool = False

    # ---- paths -------------------------------------------------------------------------------

    @property
    def tag(self) -> str:
        return self.rig_id.rsplit("-", 1)[-1]

    @property
    def bridge(self) -> str:
        return f"{LINK_PREFIX}{self.tag}b"

    @property
    def fabric_bridge(self) -> str:
        return f"{LINK_PREFIX}{self.tag}d"

    @property
    def client_key(self) -> Path:
        return self.folder / "client_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.folder / "known_hosts"

    @property
    def db(self) -> Path:
        """The journal of the current test (each test gets a fresh one: see `reset`)."""
        return self.folder / f"lanes-{self.db_name}.db"

    @property
    def model_path(self) -> Path:
        return self.folder / "models" / "tiny"

    @property
    def hf_cache(self) -> Path:
        return self.folder / "hf-cache"

    @property
    def state_on_host(self) -> Path:
        return self.folder / "lanes-state"

    @property
    def build_store(self) -> Path:
        return self.folder / "build"

    @property
    def repo(self) -> StateRepo:
        return StateRepo(self.folder)

    @property
    def clone(self) -> Path:
        return self.repo.clone

    # ---- build -------------------------------------------------------------------------------

    def setup(self) -> None:
        t0 = time.monotonic()
        ensure_packages()
        self.timings["packages"] = time.monotonic() - t0
        self.folder.mkdir(mode=0o755)
        (self.folder / "owner").write_text(process_identity(os.getpid()) + "\n")
        install_podman_conf()
        self._conf_installed = True
        self._keys()
        self._network()
        for host in self.hosts.values():
            self.accept_client_key(host.name)
            self._start_sshd(host)
        self._write_known_hosts()
        self.registry = Registry(self.folder)
        self.registry.start()
        self.timings["hosts"] = time.monotonic() - t0
        self.images = self.registry.push_standin_images(REPO, self.folder / "image", self.build_store, self.rig_id)
        self.timings["images"] = time.monotonic() - t0
        for folder in (self.model_path, self.hf_cache, self.state_on_host):
            folder.mkdir(parents=True, exist_ok=True)
        (self.model_path / "config.json").write_text('{"architectures": ["TinyForCausalLM"]}\n')
        self.repo.init(
            policies=REPO / "policies",
            hosts={h.name: (h.address, h.fabric_address) for h in self.hosts.values()},
            model_path=self.model_path,
            hf_cache=self.hf_cache,
            state_on_host=self.state_on_host,
            label=self.rig_id,
        )
        self._check_hosts()
        self.timings["setup"] = time.monotonic() - t0

    def _keys(self) -> None:
        sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{self.rig_id}-client", "-f", str(self.client_key)])
        bindir = self.folder / "bin"
        bindir.mkdir()
        wrapper = bindir / "docker"
        wrapper.write_text(DOCKER_WRAPPER.replace("@RIG@", repr(str(self.folder))))
        wrapper.chmod(0o755)

    def _network(self) -> None:
        sh(["ip", "link", "add", self.bridge, "type", "bridge"])
        self._made_bridge = True
        sh(["ip", "addr", "add", f"{ROOT_ADDRESS}/24", "dev", self.bridge])
        sh(["ip", "link", "set", self.bridge, "up"])
        for index, name in enumerate(HOST_NAMES, start=1):
            host = RigHost(
                name=name,
                index=index,
                address=f"{SUBNET}.{10 + index}",
                netns=f"{self.rig_id}-{index}",
                veth=f"{LINK_PREFIX}{self.tag}h{index}",
                folder=self.folder / "hosts" / name,
                fabric_address=f"{FABRIC_SUBNET}.{10 + index}",
                fabric_veth=f"{LINK_PREFIX}{self.tag}d{index}",
            )
            self.hosts[name] = host
            for sub in ("storage", "run", "tmp", "home"):
                (host.folder / sub).mkdir(parents=True)
            sh(["ip", "netns", "add", host.netns])
            sh(["ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns])
            sh(["ip", "link", "set", host.veth, "master", self.bridge, "up"])
            sh(["ip", "-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0"])
            sh(["ip", "-n", host.netns, "link", "set", "eth0", "up"])
            sh(["ip", "-n", host.netns, "link", "set", "lo", "up"])
            sh(["ip", "-n", host.netns, "route", "add", "default", "via", ROOT_ADDRESS])
            self._data_plane(host)

    def _data_plane(self, host: RigHost) -> None:
        """A second veth pair per host on the fabric bridge: the subnet ranks rendezvous on."""
        if not self._made_fabric:
            sh(["ip", "link", "add", self.fabric_bridge, "type", "bridge"])
            self._made_fabric = True
            sh(["ip", "link", "set", self.fabric_bridge, "up"])
        sh(
            [
                "ip",
                "link",
                "add",
                host.fabric_veth,
                "type",
                "veth",
                "peer",
                "name",
                FABRIC_INTERFACE,
                "netns",
                host.netns,
            ]
        )
        sh(["ip", "link", "set", host.fabric_veth, "master", self.fabric_bridge, "up"])
        sh(["ip", "-n", host.netns, "addr", "add", f"{host.fabric_address}/24", "dev", FABRIC_INTERFACE])
        sh(["ip", "-n", host.netns, "link", "set", FABRIC_INTERFACE, "up"])

    def _sshd_config(self, host: RigHost) -> str:
        path = f"{self.folder / 'bin'}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
        # On the data plane too, as a Spark's sshd listens on every address: staging copies host to host there.
        fabric = [f"ListenAddress {host.fabric_address}:22"] if host.fabric_address else []
        return "\n".join(
            [
                f"ListenAddress {host.address}:22",
                *fabric,
                f"HostKey {host.hostkey}",
                f"PidFile {host.pidfile}",
                f"AuthorizedKeysFile {host.authorized_keys}",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "PermitRootLogin prohibit-password",
                "StrictModes no",
                "MaxStartups 100:30:200",
                # MaxSessions is sshd's default (10 a connection), as on a stock Spark: lanes keeps a probe
                # session open on its connection and stays under the rest (transport/ssh.py COMMANDS_PER_HOST).
                "LogLevel VERBOSE",
                # Each host has a home of its own, as each Spark does (and this machine's root ~/.bashrc,
                # which bash reads for every ssh command, stays out of the hosts).
                f"SetEnv RIG_HOST={host.name} PATH={path} HOME={host.folder / 'home'}",
                "",
            ]
        )

    def _start_sshd(self, host: RigHost, *, new_key: bool = True, hide: Path | None = None, tmpfs_mb: int = 4) -> None:
        """Start a host's sshd in its network namespace; with `hide`, also in a mount namespace of its own
        where an empty tmpfs of `tmpfs_mb` covers that folder (what every command over ssh, podman, rsync's
        server and python3 included, sees: they are sshd's children and inherit its mount namespace)."""
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        if new_key:
            host.hostkey.unlink(missing_ok=True)
            host.hostkey.with_suffix(".pub").unlink(missing_ok=True)
            sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{host.name}", "-f", str(host.hostkey)])
        host.config.write_text(self._sshd_config(host))
        host.pidfile.unlink(missing_ok=True)
        sshd = ["/usr/sbin/sshd", "-f", str(host.config), "-E", str(host.sshd_log)]
        enter = ["nsenter", f"--net=/var/run/netns/{host.netns}"]
        if hide is None:
            sh([*enter, *sshd])
        else:
            # A private mount namespace (this machine's / is private anyway): the tmpfs stays this host's.
            script = 'mount -t tmpfs -o "size=$3m,mode=0755" "$1" "$2" && shift 3 && exec "$@"'
            hide.mkdir(parents=True, exist_ok=True)
            sh(
                [
                    *enter,
                    "unshare",
                    "--mount",
                    "--propagation",
                    "private",
                    "sh",
                    "-c",
                    script,
                    "sh",
                    f"{PREFIX}-hidden",
                    str(hide),
                    str(tmpfs_mb),
                    *sshd,
                ]
            )
        host.hidden = hide
        deadline = time.monotonic() + 10
        while not host.pidfile.exists() or not host.pidfile.read_text().strip():
            if time.monotonic() > deadline:
                raise RigError(f"sshd of {host.name} wrote no pid file: {host.sshd_log.read_text()}")
            time.sleep(0.02)
        host.ssh_pid = int(host.pidfile.read_text().split()[0])

    def sshd_running(self, host: RigHost) -> bool:
        return host.ssh_pid is not None and pid_alive(host.ssh_pid)

    def stop_sshd(self, host: RigHost) -> None:
        if host.pidfile.exists():
            with contextlib.suppress(ValueError, OSError):
                stop_pid(int(host.pidfile.read_text().split()[0]), must_contain=str(host.config))
        host.ssh_pid = None

    def _write_known_hosts(self) -> None:
        lines = []
        for host in self.hosts.values():
            keytype, key = host.hostkey.with_suffix(".pub").read_text().split()[:2]
            lines.append(f"{host.address} {keytype} {key}")
        self.known_hosts.write_text("\n".join(lines) + "\n")

    def engine_image(self, tag: str, env: Mapping[str, str]) -> str:
        """The digest reference of an engine image carrying its own parser (`Registry.push_engine_image`),
        built and pushed the first time a test asks for it (tens of megabytes: not every rig test needs one)."""
        assert self.registry is not None
        if tag not in self.engine_images:
            self.engine_images[tag] = self.registry.push_engine_image(
                REPO, self.folder / "image", self.build_store, tag, dict(env)
            )
        return self.engine_images[tag]

    def registry_digest(self, tag: str) -> str:
        assert self.registry is not None
        return self.registry.digest(tag)

    def _check_hosts(self) -> None:
        """Every host answers over ssh, with our docker wrapper first on its PATH and a python3."""
        for host in self.hosts.values():
            out = self.ssh(host.name, ["sh", "-c", 'command -v docker; echo "$RIG_HOST"; python3 -c "print(1)"'])
            lines = out.stdout.split()
            if lines != [str(self.folder / "bin" / "docker"), host.name, "1"]:
                raise RigError(f"{host.name}: unexpected shell environment over ssh: {out.stdout!r} {out.stderr!r}")

    # ---- state repository -------------------------------------------------------------------------

    def publish(
        self, lanes: Mapping[str, Mapping[str, Any]], message: str, hosts: Mapping[str, Mapping[str, Any]] | None = None
    ) -> str:
        """Commit these lanes (and only these; `hosts`: changes to host files), `git push` them to the forge;
        the sha lanes will see."""
        return self.repo.publish(lanes, message, hosts)

    def lane(self, name: str, hosts: Sequence[str], *, image_ref: str | None = None, **fields: Any) -> dict[str, Any]:
        """A stand-in lane (see `staterepo.lane_body`), on the v1 image unless told otherwise."""
        assert self.images is not None
        return lane_body(name, hosts, image_ref or self.images.v1, **fields)

    # ---- driving -------------------------------------------------------------------------------

    def ssh_argv(self, host: str, argv: Sequence[str], *, known_hosts: Path | None = None) -> list[str]:
        return [
            "ssh",
            "-F",
            "/dev/null",
            "-i",
            str(self.client_key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            f"UserKnownHostsFile={known_hosts or self.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=5",
            "-o",
            "LogLevel=ERROR",
            f"root@{self.hosts[host].address}",
            "--",
            shlex.join(argv),
        ]

    def ssh(
        self, host: str, argv: Sequence[str], *, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run argv on a rig host through its real sshd, with the pinned host key."""
        return sh(self.ssh_argv(host, argv), check=check, timeout=timeout)

    def docker(self, host: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.ssh(host, ["docker", *args], check=check)

    def containers(self, host: str) -> list[dict[str, Any]]:
        """`docker inspect` of every container on a host, in one ssh round trip, sorted by name."""
        out = self.ssh(host, ["sh", "-c", INSPECT_ALL]).stdout
        info: list[dict[str, Any]] = json.loads(out or "[]")
        return sorted(info, key=lambda c: str(c.get("Name", "")))

    def lanes(self, *args: str, timeout: float = 240.0) -> LaneRun:
        return run_lanes(args, cwd=self.folder, timeout=timeout)

    def apply_watching(self, on_progress: Callable[[str], None], *extra: str, timeout: float = 240.0) -> LaneRun:
        """`lanes apply --json`, calling `on_progress` with each progress line as it comes."""
        return run_lanes_watching(
            ["apply", *self.connect_args(), "--yes", "--json", *extra], on_progress, cwd=self.folder, timeout=timeout
        )

    def connect_args(self) -> list[str]:
        return [
            "--repo",
            str(self.clone),
            "--db",
            str(self.db),
            "--known-hosts",
            str(self.known_hosts),
            "--ssh-key",
            str(self.client_key),
        ]

    def apply(self, *extra: str, timeout: float = 240.0) -> LaneRun:
        return self.lanes("apply", *self.connect_args(), "--yes", "--json", *extra, timeout=timeout)

    def plan(self, *extra: str) -> LaneRun:
        return self.lanes("plan", *self.connect_args(), "--json", *extra)

    def status(self) -> LaneRun:
        return self.lanes("status", "--repo", str(self.clone), "--db", str(self.db), "--json")

    def docker_calls(self, host: str) -> int:
        """How many docker commands ran on a host so far (the wrapper logs each one)."""
        log = self.hosts[host].docker_log
        return len(log.read_text().splitlines()) if log.exists() else 0

    def set_link(self, host: str, up: bool) -> None:
        """Cut or restore a host's cable: its veth in the root namespace.

        Restored, the host's ARP entry is dropped too: connections made while the cable was cut leave it
        FAILED, and until the kernel probes again a new connection gets "No route to host" (seen once)."""
        sh(["ip", "link", "set", self.hosts[host].veth, "up" if up else "down"])
        if up:
            sh(["ip", "neigh", "flush", "to", self.hosts[host].address, "dev", self.bridge], check=False)

    def set_fabric(self, host: str, up: bool) -> None:
        """Cut or restore a host's data-plane cable (its fabric veth's bridge end); `reset` restores it."""
        sh(["ip", "link", "set", self.hosts[host].fabric_veth, "up" if up else "down"])

    def cut_link(self, host: str) -> None:
        """Cut a host's cable a while ago, as between two cycles: the link is down and this machine's ARP
        entry for it has expired, so a connection fails in the ARP timeout (3 s), not a TCP connect timeout."""
        self.set_link(host, False)
        sh(["ip", "neigh", "flush", "to", self.hosts[host].address, "dev", self.bridge], check=False)

    def replace_host_key(self, host: str) -> None:
        """Restart a host's sshd with a freshly generated host key (a reinstalled host, or an impostor).

        The pinned key is kept aside, so `restore_host_key` can put the host back as it was.
        """
        h = self.hosts[host]
        self.stop_sshd(h)
        for path in (h.hostkey, h.hostkey.with_suffix(".pub")):
            shutil.copy2(path, path.with_name(path.name + ".pinned"))
        self._start_sshd(h, new_key=True)

    def restore_host_key(self, host: str) -> None:
        h = self.hosts[host]
        pinned = h.hostkey.with_name(h.hostkey.name + ".pinned")
        if not pinned.exists():
            return
        self.stop_sshd(h)
        for path in (h.hostkey, h.hostkey.with_suffix(".pub")):
            path.with_name(path.name + ".pinned").replace(path)
        self._start_sshd(h, new_key=False)

    def accept_client_key(self, host: str) -> None:
        """The host's sshd accepts the rig's client key (as set up)."""
        path = self.hosts[host].authorized_keys
        path.write_text(self.client_key.with_suffix(".pub").read_text())
        path.chmod(0o600)

    def refuse_client_key(self, host: str) -> None:
        """Empty the host's authorized_keys: its sshd answers, and refuses the rig's key."""
        self.hosts[host].authorized_keys.write_text("")

    def reboot(self, host: str, *, down_s: float = 1.0) -> None:
        """A host reboots: its cable goes dark, sshd dies, every container is gone (podman rm -af), then
        sshd comes back with the same host key and, `down_s` later, the link."""
        h = self.hosts[host]
        self.set_link(host, False)
        try:
            self.stop_sshd(h)
            podman_local(h.folder, "rm", "-af", "-t", "0", check=False)
            self._start_sshd(h, new_key=False)
            time.sleep(down_s)
        finally:
            self.set_link(host, True)

    def hide_on(self, host: str, folder: Path) -> None:
        """Restart a host's sshd so that everything run over ssh there sees `folder` empty (a path missing
        on that host only: the rig's hosts share this machine's disk otherwise). `restore_sshd` undoes it."""
        h = self.hosts[host]
        self.stop_sshd(h)
        self._start_sshd(h, new_key=False, hide=folder)

    @property
    def models_root(self) -> Path:
        """The rig's models folder (`model_path` is a model in it)."""
        return self.folder / "models"

    def own_models(self, host: str, size_mb: int, folder: Path | None = None) -> Path:
        """Give a host a models folder of its own: its sshd restarted in a mount namespace of its own where a
        fresh tmpfs of `size_mb` MiB covers `folder` (default `models_root`), so a copy to it is a real copy
        and its free space is that tmpfs's. `restore_sshd` (and `reset`) undoes it; the tmpfs goes with the
        namespace."""
        target = folder or self.models_root
        h = self.hosts[host]
        self.stop_sshd(h)
        self._start_sshd(h, new_key=False, hide=target, tmpfs_mb=size_mb)
        return target

    def in_mounts(self, host: str, argv: Sequence[str], *, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run argv as root in the host's sshd's mount namespace (to lay files into its own models folder)."""
        h = self.hosts[host]
        if h.ssh_pid is None:
            raise RigError(f"{host}: no sshd")
        return sh(["nsenter", "-t", str(h.ssh_pid), "-m", *argv], timeout=timeout)

    def slow_link(self, host: str, mbit: int, *, fabric: bool = False) -> None:
        """Limit what reaches a host over its SSH link (or, `fabric`, its data-plane link) to `mbit` (a token
        bucket on the veth's bridge end); `reset` lifts it."""
        h = self.hosts[host]
        sh(
            [
                "tc",
                "qdisc",
                "replace",
                "dev",
                h.fabric_veth if fabric else h.veth,
                "root",
                "tbf",
                "rate",
                f"{mbit}mbit",
                "burst",
                "256kb",
                "latency",
                "100ms",
            ]
        )

    def unslow_link(self, host: str) -> None:
        for veth in (self.hosts[host].veth, self.hosts[host].fabric_veth):
            sh(["tc", "qdisc", "del", "dev", veth, "root"], check=False)

    def restore_sshd(self, host: str) -> None:
        """The host's sshd as set up: running, in the root mount namespace, with the pinned host key."""
        h = self.hosts[host]
        if h.hostkey.with_name(h.hostkey.name + ".pinned").exists():
            self.restore_host_key(host)
        if h.hidden is not None or not self.sshd_running(h):
            self.stop_sshd(h)
            self._start_sshd(h, new_key=False)

    def reset(self, name: str) -> None:
        """Between tests: every link up, every sshd as set up and accepting our key, the registry up, no
        container on any host, no v2 image, a fresh journal named after the test."""
        for host in self.hosts.values():
            self.set_link(host.name, True)
            self.set_fabric(host.name, True)
            self.unslow_link(host.name)
            self.accept_client_key(host.name)
            self.restore_sshd(host.name)
            podman_local(host.folder, "rm", "-af", "-t", "0", check=False)
            if self.images is not None:  # v1 stays pulled (fast tests); v2 must be pulled by a test itself
                podman_local(host.folder, "rmi", "-f", self.images.v2, check=False)
        if self.registry is not None and not self.registry.running:
            self.registry.start()
        self.db_name = name
        self.db.unlink(missing_ok=True)

    # ---- teardown ------------------------------------------------------------------------------

    def teardown(self) -> list[str]:
        """Undo everything; each step runs even if an earlier one failed. Returns what went wrong."""
        problems: list[str] = []

        def step(what: str, fn: Any) -> None:
            try:
                fn()
            except Exception as exc:
                problems.append(f"{what}: {exc}")

        for host in self.hosts.values():
            step(
                f"containers of {host.name}",
                lambda h=host: (
                    podman_local(h.folder, "rm", "-af", "-t", "0", check=False),
                    podman_local(h.folder, "rmi", "-af", check=False),
                ),
            )
        for host in self.hosts.values():
            step(f"sshd of {host.name}", lambda h=host: self.stop_sshd(h))
        if self.registry is not None:
            step("registry", self.registry.stop)
        for host in self.hosts.values():
            step(f"netns {host.netns}", lambda h=host: sh(["ip", "netns", "delete", h.netns], check=False))
            step(f"veth {host.veth}", lambda h=host: delete_link(h.veth))
            if host.fabric_veth:
                step(f"veth {host.fabric_veth}", lambda h=host: delete_link(h.fabric_veth))
        if self._made_bridge:
            step("bridge", lambda: delete_link(self.bridge))
        if self._made_fabric:
            step("fabric bridge", lambda: delete_link(self.fabric_bridge))
        if self._conf_installed:
            step("containers.conf", restore_podman_conf)
        if self.folder.exists():
            step("rig folder", lambda: remove_rig_dir(self.folder))
        return problems


@contextlib.contextmanager
def running_rig() -> Iterator[Rig]:
    """Build a rig, yield it, always tear it down (for scripts: `python -m tests.rig.rig`)."""
    cleanup_stale()
    rig = Rig()
    try:
        rig.setup()
        yield rig
    finally:
        problems = rig.teardown()
        if problems:
            raise RigError("teardown: " + "; ".join(problems))


if __name__ == "__main__":
    with running_rig() as r:
        print(json.dumps({k: round(v, 2) for k, v in r.timings.items()}))
        print(r.images)
        for h in r.hosts.values():
            print(h.name, r.ssh(h.name, ["docker", "ps"]).stdout.strip())
