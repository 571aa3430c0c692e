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
See ../shared/RIG.md for what was seen working on this machine.
"""

from __future__ import annotations

import contextlib
import hashlib
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

import httpx

from tests.rig import image
from tests.rig.machine import (
    DOCKER_WRAPPER,
    ENGINE_PORT,
    HOST_NAMES,
    IMAGE_REPO,
    LANES_ENV,
    LINK_PREFIX,
    PREFIX,
    REGISTRY,
    ROOT_ADDRESS,
    STANDIN_ARGS,
    SUBNET,
    RigError,
    cleanup_stale,
    delete_link,
    ensure_packages,
    install_podman_conf,
    podman_local,
    remove_rig_dir,
    restore_podman_conf,
    sh,
    stop_pid,
)

REPO = Path(__file__).resolve().parents[2]
LANES = REPO / ".venv" / "bin" / "lanes"

@dataclass
class RigHost:
    name: str
    index: int
    address: str
    netns: str
    veth: str
    folder: Path
    ssh_pid: int | None = None

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


@dataclass
class Images:
    """The stand-in image in the rig's registry: two tags with different content, by digest."""

    v1: str
    v2: str
    missing: str
    """A well-formed digest reference the registry does not hold."""


@dataclass
class LaneRun:
    """One `lanes` invocation."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def json(self) -> dict[str, Any]:
        # The one JSON object starts at a line that is "{"; structlog lines may precede it
        # (the CLI does not configure structlog, whose default logger prints to stdout).
        start = self.stdout.find("{") if self.stdout.startswith("{") else self.stdout.find("\n{") + 1
        try:
            data: dict[str, Any] = json.loads(self.stdout[start:] if start >= 0 else self.stdout)
        except ValueError as exc:
            raise AssertionError(f"not JSON from {shlex.join(self.argv)} (exit {self.returncode}):\n"
                                 f"{self.stdout[-3000:]}\nstderr:\n{self.stderr[-3000:]}") from exc
        return data

    def describe(self) -> str:
        return (f"$ {shlex.join(self.argv)}\nexit {self.returncode} after {self.seconds:.1f} s\n"
                f"stdout:\n{self.stdout[-4000:]}\nstderr:\n{self.stderr[-4000:]}")


@dataclass
class Rig:
    rig_id: str = field(default_factory=lambda: f"{PREFIX}-{os.getpid()}")
    folder: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / f"{PREFIX}-{os.getpid()}")
    hosts: dict[str, RigHost] = field(default_factory=dict)
    images: Images | None = None
    registry_proc: subprocess.Popen[bytes] | None = None
    timings: dict[str, float] = field(default_factory=dict)
    db_name: str = "main"
    _made_bridge: bool = False
    _conf_installed: bool = False

    # ---- paths -------------------------------------------------------------------------------

    @property
    def tag(self) -> str:
        return self.rig_id.rsplit("-", 1)[-1]

    @property
    def bridge(self) -> str:
        return f"{LINK_PREFIX}{self.tag}b"

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
    def work_repo(self) -> Path:
        return self.folder / "state-work"

    @property
    def forge(self) -> Path:
        return self.folder / "forge.git"

    @property
    def clone(self) -> Path:
        return self.folder / "state-clone"

    # ---- build -------------------------------------------------------------------------------

    def setup(self) -> None:
        t0 = time.monotonic()
        ensure_packages()
        self.timings["packages"] = time.monotonic() - t0
        self.folder.mkdir(mode=0o755)
        install_podman_conf()
        self._conf_installed = True
        self._keys()
        self._network()
        for host in self.hosts.values():
            self._start_sshd(host)
        self._write_known_hosts()
        self._start_registry()
        self.timings["hosts"] = time.monotonic() - t0
        self.images = self._build_images()
        self.timings["images"] = time.monotonic() - t0
        for folder in (self.model_path, self.hf_cache, self.state_on_host):
            folder.mkdir(parents=True, exist_ok=True)
        (self.model_path / "config.json").write_text('{"architectures": ["TinyForCausalLM"]}\n')
        self._init_state_repo()
        self._check_hosts()
        self.timings["setup"] = time.monotonic() - t0

    def _keys(self) -> None:
        sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{self.rig_id}-client", "-f",
            str(self.client_key)])
        authorized = self.folder / "authorized_keys"
        authorized.write_text(self.client_key.with_suffix(".pub").read_text())
        authorized.chmod(0o600)
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
            host = RigHost(name=name, index=index, address=f"{SUBNET}.{10 + index}",
                           netns=f"{self.rig_id}-{index}", veth=f"{LINK_PREFIX}{self.tag}h{index}",
                           folder=self.folder / "hosts" / name)
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

    def _sshd_config(self, host: RigHost) -> str:
        path = f"{self.folder / 'bin'}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
        return "\n".join([
            f"ListenAddress {host.address}:22",
            f"HostKey {host.hostkey}",
            f"PidFile {host.pidfile}",
            f"AuthorizedKeysFile {self.folder / 'authorized_keys'}",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "PermitRootLogin prohibit-password",
            "StrictModes no",
            "MaxStartups 100:30:200",
            "MaxSessions 100",
            "LogLevel VERBOSE",
            # Each host has a home of its own, as each Spark does (and this machine's root ~/.bashrc,
            # which bash reads for every ssh command, stays out of the hosts).
            f"SetEnv RIG_HOST={host.name} PATH={path} HOME={host.folder / 'home'}",
            "",
        ])

    def _start_sshd(self, host: RigHost, *, new_key: bool = True) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        if new_key:
            host.hostkey.unlink(missing_ok=True)
            host.hostkey.with_suffix(".pub").unlink(missing_ok=True)
            sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{host.name}", "-f", str(host.hostkey)])
        host.config.write_text(self._sshd_config(host))
        host.pidfile.unlink(missing_ok=True)
        sh(["nsenter", f"--net=/var/run/netns/{host.netns}", "/usr/sbin/sshd", "-f", str(host.config),
            "-E", str(host.folder / "sshd.log")])
        deadline = time.monotonic() + 10
        while not host.pidfile.exists() or not host.pidfile.read_text().strip():
            if time.monotonic() > deadline:
                raise RigError(f"sshd of {host.name} wrote no pid file: {(host.folder / 'sshd.log').read_text()}")
            time.sleep(0.02)
        host.ssh_pid = int(host.pidfile.read_text().split()[0])

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

    def _start_registry(self) -> None:
        config = self.folder / "registry.yml"
        config.write_text(json.dumps({
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self.folder / "registry")}, "delete": {"enabled": True}},
            "http": {"addr": REGISTRY},
        }))
        with (self.folder / "registry.log").open("ab") as log:
            self.registry_proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log,
                                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        (self.folder / "registry.pid").write_text(f"{self.registry_proc.pid}\n")
        deadline = time.monotonic() + 15
        while True:
            try:
                if httpx.get(f"http://{REGISTRY}/v2/", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.registry_proc.poll() is not None or time.monotonic() > deadline:
                raise RigError(f"docker-registry did not come up: {(self.folder / 'registry.log').read_text()}")
            time.sleep(0.05)

    def _build_images(self) -> Images:
        work = self.folder / "image"
        root = work / "rootfs"
        root.mkdir(parents=True)
        image.build_rootfs(REPO, root, work)
        refs = {}
        for tag in ("v1", "v2"):
            tar = work / f"{tag}.tar"
            image.write_tar(root, tar, {"etc/lanes-rig-image": f"{self.rig_id} {tag}\n"})
            name = f"{REGISTRY}/{IMAGE_REPO}:{tag}"
            podman_local(self.build_store, "import", "--change", "ENV PATH=/usr/local/bin:/usr/bin:/bin",
                         "--change", "ENV STANDIN_LOAD_S=0.5", "--change", "ENV STANDIN_TG_TPS=500",
                         "--change", f"ENV STANDIN_VERSION=rig-{tag}",
                         "--change", 'CMD ["python3", "-m", "reconciler.sim.standin"]', str(tar), name)
            podman_local(self.build_store, "push", "--tls-verify=false", name)
            refs[tag] = f"{REGISTRY}/{IMAGE_REPO}@{self.registry_digest(tag)}"
        missing = "sha256:" + hashlib.sha256(f"{self.rig_id} never pushed".encode()).hexdigest()
        return Images(v1=refs["v1"], v2=refs["v2"], missing=f"{REGISTRY}/{IMAGE_REPO}@{missing}")

    def registry_digest(self, tag: str) -> str:
        accept = ", ".join([
            "application/vnd.oci.image.manifest.v1+json",
            "application/vnd.docker.distribution.manifest.v2+json",
            "application/vnd.oci.image.index.v1+json",
            "application/vnd.docker.distribution.manifest.list.v2+json",
        ])
        r = httpx.head(f"http://{REGISTRY}/v2/{IMAGE_REPO}/manifests/{tag}", headers={"Accept": accept}, timeout=5)
        if r.status_code != 200 or "docker-content-digest" not in r.headers:
            raise RigError(f"registry has no manifest for {IMAGE_REPO}:{tag} (HTTP {r.status_code})")
        return r.headers["docker-content-digest"]

    def _check_hosts(self) -> None:
        """Every host answers over ssh, with our docker wrapper first on its PATH and a python3."""
        for host in self.hosts.values():
            out = self.ssh(host.name, ["sh", "-c", 'command -v docker; echo "$RIG_HOST"; python3 -c "print(1)"'])
            lines = out.stdout.split()
            if lines != [str(self.folder / "bin" / "docker"), host.name, "1"]:
                raise RigError(f"{host.name}: unexpected shell environment over ssh: {out.stdout!r} {out.stderr!r}")

    # ---- state repository ------------------------------------------------------------------------

    def _git(self, *args: str, cwd: Path | None = None) -> str:
        env = {**os.environ, "GIT_AUTHOR_NAME": "rig", "GIT_AUTHOR_EMAIL": "rig@lanes.invalid",
               "GIT_COMMITTER_NAME": "rig", "GIT_COMMITTER_EMAIL": "rig@lanes.invalid",
               "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
        return sh(["git", *args], cwd=cwd, env=env).stdout.strip()

    def _init_state_repo(self) -> None:
        self._git("init", "-q", "--bare", "-b", "main", str(self.forge))
        self._git("init", "-q", "-b", "main", str(self.work_repo))
        work = self.work_repo
        shutil.copytree(REPO / "policies", work / "policies")
        state = work / "state"
        (state / "hosts").mkdir(parents=True)
        (state / "models").mkdir()
        (state / "lanes").mkdir()
        write_json_yaml(state / "fleet.yaml", {
            "ssh_user": "root", "ssh_port": 22, "network_interface": "eth0", "hf_cache": str(self.hf_cache),
            "state_dir_on_host": str(self.state_on_host), "lease_ttl_s": 300,
        })
        for host in self.hosts.values():
            write_json_yaml(state / "hosts" / f"{host.name}.yaml", {
                "address": host.address, "hardware": "gb10", "labels": {"rig": self.rig_id},
            })
        write_json_yaml(state / "models" / "tiny.yaml", {
            "hf_repo": "lanes-rig/tiny", "revision": "0" * 40, "path": str(self.model_path),
            "weight_bytes": 64 * 1024 * 1024, "quantization": "bf16",
            "architecture": {"layers": 2, "attention": "gqa", "num_heads": 4, "kv_heads": 2, "head_dim": 64,
                             "hidden_size": 256},
        })
        self._git("add", "-A", cwd=work)
        self._git("commit", "-q", "-m", "rig: fleet, hosts, model, policies", cwd=work)
        self._git("remote", "add", "origin", str(self.forge), cwd=work)
        self._git("push", "-q", "origin", "main", cwd=work)
        self._git("clone", "-q", str(self.forge), str(self.clone))

    def publish(self, lanes: Mapping[str, Mapping[str, Any]], message: str) -> str:
        """Commit exactly these lanes in the work repo, `git push` to the forge, pull the clone. Returns the sha."""
        folder = self.work_repo / "state" / "lanes"
        for old in folder.glob("*.yaml"):
            old.unlink()
        for name, body in lanes.items():
            write_json_yaml(folder / f"{name}.yaml", body)
        self._git("add", "-A", cwd=self.work_repo)
        self._git("commit", "-q", "--allow-empty", "-m", message, cwd=self.work_repo)
        self._git("push", "-q", "origin", "main", cwd=self.work_repo)
        self._git("pull", "-q", "--ff-only", cwd=self.clone)
        sha = self._git("rev-parse", "HEAD", cwd=self.clone)
        if sha != self._git("rev-parse", "HEAD", cwd=self.work_repo):
            raise RigError("the clone did not get the pushed commit")
        return sha

    def lane(self, name: str, hosts: Sequence[str], *, image_ref: str | None = None, port: int = ENGINE_PORT,
             desired: str = "running", env: Mapping[str, str] | None = None, args: Sequence[str] | None = None,
             mounts: Sequence[Mapping[str, Any]] = (), health: Mapping[str, float] | None = None,
             served: str | None = None) -> dict[str, Any]:
        """A generic-engine lane whose command is the stand-in."""
        assert self.images is not None
        served_name = served or f"{name}-model"
        command = list(args) if args is not None else [
            *STANDIN_ARGS, "--port", str(port), "--served-model-name", served_name]
        return {
            "description": f"rig lane {name}",
            "desired": desired,
            "engine": "generic",
            "engine_version": "0.0.0+standin",
            "image": image_ref or self.images.v1,
            "model": "tiny",
            "served_model_name": served_name,
            "hosts": list(hosts),
            "tp": len(hosts),
            "max_model_len": 4096,
            "gpu_memory_utilization": 0.3,
            "port": port,
            "args": command,
            "env": dict(env or {}),
            "mounts": [dict(m) for m in mounts],
            "health": dict(health or {"port_timeout_s": 30, "ready_timeout_s": 30, "models_timeout_s": 15,
                                      "completion_timeout_s": 15, "poll_interval_s": 0.25}),
        }

    # ---- driving -------------------------------------------------------------------------------

    def ssh_argv(self, host: str, argv: Sequence[str], *, known_hosts: Path | None = None) -> list[str]:
        return ["ssh", "-F", "/dev/null", "-i", str(self.client_key), "-o", "IdentitiesOnly=yes",
                "-o", f"UserKnownHostsFile={known_hosts or self.known_hosts}", "-o", "StrictHostKeyChecking=yes",
                "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR",
                f"root@{self.hosts[host].address}", "--", shlex.join(argv)]

    def ssh(self, host: str, argv: Sequence[str], *, check: bool = True, timeout: float = 60.0
            ) -> subprocess.CompletedProcess[str]:
        """Run argv on a rig host through its real sshd, with the pinned host key."""
        return sh(self.ssh_argv(host, argv), check=check, timeout=timeout)

    def docker(self, host: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.ssh(host, ["docker", *args], check=check)

    def containers(self, host: str) -> list[dict[str, Any]]:
        """`docker inspect` of every container on a host (over ssh), sorted by name."""
        ids = self.docker(host, "ps", "-aq").stdout.split()
        if not ids:
            return []
        info: list[dict[str, Any]] = json.loads(self.docker(host, "inspect", *ids).stdout)
        return sorted(info, key=lambda c: str(c.get("Name", "")))

    def lanes(self, *args: str, timeout: float = 240.0) -> LaneRun:
        argv = [str(LANES), *args]
        t0 = time.monotonic()
        result = sh(argv, check=False, timeout=timeout, cwd=self.folder, env=LANES_ENV)
        return LaneRun(argv, result.returncode, result.stdout, result.stderr, time.monotonic() - t0)

    def apply_watching(self, on_progress: Callable[[str], None], *extra: str, timeout: float = 240.0) -> LaneRun:
        """`lanes apply --json`, calling `on_progress` with each progress line (stderr) as it comes."""
        argv = [str(LANES), "apply", *self.connect_args(), "--yes", "--json", *extra]
        t0 = time.monotonic()
        with tempfile.TemporaryFile("w+") as out, subprocess.Popen(
                argv, stdout=out, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=self.folder,
                env=LANES_ENV) as proc:
            assert proc.stderr is not None
            lines = []
            try:
                for line in proc.stderr:
                    lines.append(line)
                    on_progress(line)
                    if time.monotonic() - t0 > timeout:
                        raise RigError(f"lanes apply ran over {timeout} s")
                proc.wait(timeout=max(timeout - (time.monotonic() - t0), 1))
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            out.seek(0)
            return LaneRun(argv, proc.returncode, out.read(), "".join(lines), time.monotonic() - t0)

    def connect_args(self) -> list[str]:
        return ["--repo", str(self.clone), "--db", str(self.db), "--known-hosts", str(self.known_hosts),
                "--ssh-key", str(self.client_key)]

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
        """Cut or restore a host's cable: its veth in the root namespace."""
        sh(["ip", "link", "set", self.hosts[host].veth, "up" if up else "down"])

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

    def reset(self, name: str) -> None:
        """Between tests: every link up, no container nor image on any host, a fresh journal named after the test."""
        for host in self.hosts.values():
            self.set_link(host.name, True)
            podman_local(host.folder, "rm", "-af", "-t", "0", check=False)
            podman_local(host.folder, "rmi", "-af", check=False)
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
            step(f"containers of {host.name}", lambda h=host: (
                podman_local(h.folder, "rm", "-af", "-t", "0", check=False),
                podman_local(h.folder, "rmi", "-af", check=False)))
        for host in self.hosts.values():
            step(f"sshd of {host.name}", lambda h=host: self.stop_sshd(h))
        if self.registry_proc is not None:
            proc = self.registry_proc

            def stop_registry() -> None:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)

            step("registry", stop_registry)
        for host in self.hosts.values():
            step(f"netns {host.netns}", lambda h=host: sh(["ip", "netns", "delete", h.netns], check=False))
            step(f"veth {host.veth}", lambda h=host: delete_link(h.veth))
        if self._made_bridge:
            step("bridge", lambda: delete_link(self.bridge))
        if self._conf_installed:
            step("containers.conf", restore_podman_conf)
        if self.folder.exists():
            step("rig folder", lambda: remove_rig_dir(self.folder))
        return problems


def write_json_yaml(path: Path, body: Mapping[str, Any]) -> None:
    """JSON is YAML: every string (newlines, quotes, `$(...)`) round-trips exactly, escaped."""
    path.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n")


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
