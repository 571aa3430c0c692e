"""The docker subcommands a simulated Spark answers, with docker's outputs, errors and exit codes.

Covers what the reconciler sends and what a person debugging a lane types:
pull, run, ps, inspect, stop, rm, logs, image inspect (plus the
`docker container ...` / `docker image ...` spellings). Error messages and
exit statuses copy docker's, because the executor reports them verbatim
and tests assert on them: an unknown digest is exit 1 "manifest unknown",
a name in use is exit 125 "Conflict", a missing container exit 1 "No such
container". What `inspect`, `image inspect`, `pull`, `stop`, `rm` and `logs`
print is held to real docker outputs recorded in `tests/facts/cases/`
(`tests/facts/test_docker_sim.py`): the same fields with the same JSON types.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any

from reconciler.facts.cudareq import driver_gives, required_cuda
from reconciler.facts.imagecheck import LAUNCHER_MARKER, LAUNCHER_MISSING_EXIT, LAUNCHER_SCRIPT
from reconciler.facts.preflight import SCRIPTS
from reconciler.sim import dockercli as cli
from reconciler.sim.containers import SimContainer, now_rfc3339
from reconciler.sim.dockercli import CliError
from reconciler.sim.engineargs import parser_refusal
from reconciler.sim.registry import ImageRef, SimImage, SimRegistry, registry_path
from reconciler.sim.sharedclient import SharedStandinClient, SharedStandinError

Result = tuple[int, str, str]
LAUNCHER_CHECK = ["-c", LAUNCHER_SCRIPT, LAUNCHER_MARKER]
PREFLIGHTS = {("-c", script): engine for engine, script in SCRIPTS.items()}


class SimDockerDaemon:
    """Containers and local images of one host, driven by docker argv lists."""

    def __init__(
        self,
        address: str,
        registry: SimRegistry,
        work_dir: Path,
        read_envfile: Callable[[str], str | None],
        shared: SharedStandinClient | None = None,
    ) -> None:
        self.address = address
        self.shared = shared  # set: containers' engines live in this one shared stand-in process
        self.read_envfile = read_envfile  # env files live with the host's other files
        self.registry = registry
        self.work_dir = work_dir
        self.containers: dict[str, SimContainer] = {}  # by name
        self.images: dict[str, SimImage] = {}  # by repo@digest
        self.tags: dict[tuple[str, str], str] = {}  # (repo, tag) -> digest
        self.spawned: list[SimContainer] = []  # every container ever started, for leak checks
        self.gpu_release_s = 0.0
        """How long an ended container's GPU context stays held; a test sets it to show the wait before a start."""
        self.gpu_held_until = 0.0
        self.peers: Callable[[], dict[str, str]] = dict
        """Rendered address -> simulated address of every host of the fleet (its fleet sets it), for the
        stand-ins that reach another host by the address lanes rendered (a Ray worker joining its head)."""
        self.driver_cuda: Callable[[], str | None] = lambda: "13.0"
        """The CUDA version the host's driver supports, as nvidia-smi says (the runtime hands over its facts')."""
        self.device_paths: Callable[[], Collection[str]] = lambda: {"/dev/infiniband"}
        """Device paths `docker run --device` finds on this host (the runtime hands over its host facts')."""
        self._commands: dict[str, Callable[[list[str]], Awaitable[Result]]] = {
            "pull": self.pull,
            "image pull": self.pull,
            "image inspect": self._image_inspect,
            "run": self.run,
            "ps": self.ps,
            "inspect": self.inspect,
            "stop": self.stop,
            "rm": self.rm,
            "logs": self.logs,
        }

    async def docker(self, args: list[str]) -> Result:
        if not args:
            return 1, "", "Usage:  docker [OPTIONS] COMMAND\n"
        sub, rest = args[0], args[1:]
        if sub == "image" and rest[:1] in (["inspect"], ["pull"]):
            sub, rest = "image " + rest[0], rest[1:]
        elif sub == "container" and rest:
            sub, rest = ("ps" if rest[0] == "ls" else rest[0]), rest[1:]
        handler = self._commands.get(sub)
        if handler is None:
            return 1, "", f"docker: '{' '.join(args[:2])}' is not a docker command.\nSee 'docker --help'\n"
        try:
            return await handler(rest)
        except CliError as exc:
            return exc.status, "", exc.message.rstrip("\n") + "\n"

    # -- images ------------------------------------------------------------

    def local_image(self, ref: str) -> SimImage | None:
        try:
            parsed = ImageRef.parse(ref)
        except ValueError:
            return None
        digest = parsed.digest or self.tags.get((parsed.repo, parsed.tag or "latest"))
        return self.images.get(f"{parsed.repo}@{digest}") if digest else None

    async def _fetch(self, ref: str) -> SimImage:
        try:
            parsed = ImageRef.parse(ref)
        except ValueError as exc:
            raise CliError(f'invalid reference format: repository name "{ref}" must be lowercase', 1) from exc
        await asyncio.sleep(self.registry.pull_delay_s)
        image = self.registry.resolve(ref)
        if image is None:
            if self.registry.knows_repo(parsed.repo):
                raise CliError(
                    f"Error response from daemon: manifest for {ref} not found: manifest unknown: manifest unknown", 1
                )
            raise cli.pull_denied(parsed.repo)
        self.images[image.pinned] = image
        if parsed.tag and not parsed.digest:
            self.tags[(parsed.repo, parsed.tag)] = image.digest
        return image

    async def pull(self, args: list[str]) -> Result:
        opts = cli.parse_options(args, cli.words("--platform"), cli.words("-q --quiet"), "pull", {"-q": "--quiet"})
        if len(opts.positionals) != 1:
            raise CliError("\"docker pull\" requires exactly 1 argument.\nSee 'docker pull --help'.", 1)
        ref = opts.positionals[0]
        had = self.local_image(ref)
        image = await self._fetch(ref)
        if "--quiet" in opts.flags:
            return 0, ref + "\n", ""
        parsed = ImageRef.parse(ref)
        status = "Image is up to date for" if had == image else "Downloaded newer image for"
        # docker names a pull by its tag, or by the whole reference when it is pinned, and the repository
        # by its path on the registry (no per-layer lines here: a simulated image has no layers).
        named = parsed.tag if parsed.tag and not parsed.digest else ref
        out = f"{named}: Pulling from {registry_path(parsed.repo)}\nDigest: {image.digest}\n"
        return 0, out + f"Status: {status} {ref}\n{ref}\n", ""

    async def _image_inspect(self, args: list[str]) -> Result:
        return self.image_inspect(args)

    def image_inspect(self, args: list[str]) -> Result:
        opts = cli.parse_options(args, cli.words("--format -f"), frozenset(), "image inspect", {"-f": "--format"})
        found, errors = [], []
        for ref in opts.positionals:
            image = self.local_image(ref)
            if image is None:
                errors.append(f"Error: No such image: {ref}")
                continue
            tags = [f"{r}:{t}" for (r, t), d in sorted(self.tags.items()) if r == image.repo and d == image.digest]
            env = [f"{k}={v}" for k, v in image.env.items()]
            found.append(
                {
                    "Id": image.image_id,
                    "RepoTags": tags,
                    "RepoDigests": [image.pinned],
                    "Architecture": "arm64",
                    "Os": "linux",
                    "Config": {"Env": env},
                }
            )
        return self._listing(found, errors, opts.last("--format"))

    # -- containers --------------------------------------------------------

    def find(self, ref: str) -> SimContainer | None:
        """By name, then full id, then a unique id prefix, as docker resolves them."""
        if ref in self.containers:
            return self.containers[ref]
        matches = [c for c in self.containers.values() if c.id.startswith(ref)] if ref else []
        return matches[0] if len(matches) == 1 else None

    async def run(self, args: list[str]) -> Result:
        opts = cli.parse_options(args, cli.RUN_VALUE_OPTIONS, cli.RUN_FLAGS, "run", cli.RUN_ALIASES)
        if not opts.positionals:
            raise CliError("\"docker run\" requires at least 1 argument.\nSee 'docker run --help'.", 125)
        image_ref, cmd = opts.positionals[0], opts.positionals[1:]
        if "--detach" not in opts.flags:
            if "--rm" in opts.flags and opts.last("--entrypoint") == "sh" and cmd[:3] == LAUNCHER_CHECK:
                return self._launcher_check(image_ref, cmd[3:])
            engine = PREFLIGHTS.get((cmd[0], cmd[1])) if len(cmd) >= 2 else None
            if "--rm" in opts.flags and opts.last("--entrypoint") == "python3" and engine is not None:
                return await self._preflight(opts, image_ref, engine, cmd[2:])
            raise CliError("sim: only detached runs (docker run -d) and lanes' launcher check are supported", 125)
        name = opts.last("--name") or "sim_" + secrets.token_hex(4)
        cli.check_name(name)
        if name in self.containers:
            raise cli.name_conflict(name, self.containers[name].id)
        host_config = self._host_config(opts)  # the CLI refuses a bad size or ulimit before anything happens
        env_files = []
        for path in opts.all("--env-file"):
            written = self.read_envfile(path)
            if written is None:
                raise CliError(f"docker: open {path}: no such file or directory.\nSee 'docker run --help'.", 125)
            env_files += cli.parse_env_file(written)
        stderr = ""
        image = self.local_image(image_ref)
        if image is None:
            stderr = f"Unable to find image '{image_ref}' locally\n"
            try:
                image = await self._fetch(image_ref)
            except CliError as exc:
                raise CliError(stderr + "docker: " + exc.message + "\nSee 'docker run --help'.", 125) from exc
        cid = secrets.token_hex(32)
        container = SimContainer(
            id=cid,
            name=name,
            image_ref=image_ref,
            image=image,
            labels=cli.parse_labels(opts.all("--label")),
            # The CLI sends the env files' variables, then the -e ones; the daemon puts the image's first.
            env=[f"{k}={v}" for k, v in image.env.items()] + env_files + cli.parse_env(opts.all("--env")),
            cmd=cmd,
            entrypoint=[e] if (e := opts.last("--entrypoint")) else [],
            host_config=host_config,
            log_path=self.work_dir / f"{cid[:12]}-{name}.log",
            auto_remove="--rm" in opts.flags,
            shared=self.shared,
        )
        self.containers[name] = container
        needed, gives = required_cuda(container.env), self.driver_cuda()
        if host_config["DeviceRequests"] is not None and needed and gives and not driver_gives(gives, needed):
            # The NVIDIA runtime's prestart hook refuses it: the container stays created, never started.
            container.exit_code, container.error = (
                128,
                (
                    "failed to create task for container: failed to create shim task: OCI runtime create failed: "
                    "runc create failed: unable to start container process: error during container init: error "
                    "running hook #0: error running hook: exit status 1, stdout: , stderr: nvidia-container-cli: "
                    f"requirement error: unsatisfied condition: cuda>={needed}, please update your driver to a newer "
                    "version, or use an earlier cuda container: unknown"
                ),
            )
            return 127, cid + "\n", stderr + f"docker: Error response from daemon: {container.error}.\n"
        if host_config["DeviceRequests"] is not None and self.gpu_held_for() > 0:
            # As an engine dies on a Spark whose GPU a previous engine still holds (sparkrun-recipes'
            # launch-sgl-dsv41.sh waits for a free GPU for exactly this reason).
            container.log_path.write_text(
                "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable\n"
            )
            container.started_at = now_rfc3339()
            container.mark_exited(1)
            self.spawned.append(container)
            return 0, cid + "\n", stderr
        try:
            await container.launch(self.address, self.work_dir, self.peers())
        except SharedStandinError as exc:
            # As when dockerd cannot reach containerd: the container exists, created, never started, and
            # docker has already printed its id; inspect shows ExitCode 128 and the error.
            container.exit_code, container.error = 128, f"failed to create task: {exc}"
            return 125, cid + "\n", stderr + f"docker: Error response from daemon: {container.error}\n"
        self.spawned.append(container)
        return 0, cid + "\n", stderr

    async def _preflight(self, opts: cli.Options, image_ref: str, engine: str, args: list[str]) -> Result:
        """What `facts/preflight.py`'s parse-only script does in the image: the image's parser's verdict.

        As docker does for any run: the name must be free, the options valid, the image local or pulled;
        an image without python3 fails as exec does. The parser is the image's own (`parser_refusal`:
        its STANDIN_PARSER, else the table of the release or build it carries)."""
        name = opts.last("--name")
        if name is not None:
            cli.check_name(name)
            if name in self.containers:
                raise cli.name_conflict(name, self.containers[name].id)
        self._host_config(opts)
        image = self.local_image(image_ref)
        pulled = ""
        if image is None:
            pulled = f"Unable to find image '{image_ref}' locally\n"
            try:
                image = await self._fetch(image_ref)
            except CliError as exc:
                raise CliError(pulled + "docker: " + exc.message + "\nSee 'docker run --help'.", 125) from exc
        if "python3" in image.lacks:
            return (
                127,
                "",
                pulled
                + (
                    "docker: Error response from daemon: failed to create task for container: failed to create shim "
                    "task: OCI runtime create failed: runc create failed: unable to start container process: exec: "
                    '"python3": executable file not found in $PATH: unknown.\n'
                ),
            )
        env = image.env
        refused = parser_refusal(engine, args, env.get("STANDIN_VERSION", ""), env.get("STANDIN_PARSER", ""))
        if refused is None:
            return 0, "", pulled
        status, stderr = refused
        return status, "", pulled + stderr

    def _launcher_check(self, image_ref: str, names: list[str]) -> Result:
        """What `facts/imagecheck.py`'s script prints in an image that lacks `SimImage.lacks`."""
        image = self.local_image(image_ref)
        if image is None:
            raise CliError(f"Unable to find image '{image_ref}' locally", 125)
        missing = [name for name in names if name in image.lacks]
        if missing:
            return LAUNCHER_MISSING_EXIT, "missing: " + " ".join(missing) + "\n", ""
        return 0, "", ""

    def _host_config(self, opts: cli.Options) -> dict[str, Any]:
        # Typed as docker prints them: sizes in bytes, null for a list no flag filled (Go's nil slice).
        memory = cli.ram_in_bytes(m, "--memory") if (m := opts.last("--memory")) else 0
        swap_text = opts.last("--memory-swap")
        swap = -1 if swap_text == "-1" else (cli.ram_in_bytes(swap_text, "--memory-swap") if swap_text else 0)
        if swap and not memory:
            raise CliError("docker: You should always set the Memory limit when using Memoryswap limit, see "
                           "usage.\nSee 'docker run --help'.", 125)  # fmt: skip
        if swap > 0 and swap < memory:
            raise CliError("docker: Minimum memoryswap limit should be larger than memory limit, see usage.\n"
                           "See 'docker run --help'.", 125)  # fmt: skip
        devices = []
        for device in opts.all("--device"):
            path = device.split(":")[0]
            if path not in self.device_paths():
                raise CliError(
                    "docker: Error response from daemon: error gathering device information while adding custom "
                    f"device \"{path}\": no such file or directory.\nSee 'docker run --help'.",
                    125,
                )
            target = device.split(":")[1] if ":" in device else path
            devices.append({"PathOnHost": path, "PathInContainer": target, "CgroupPermissions": "rwm"})
        return {
            "NetworkMode": opts.last("--network", "bridge"),
            "IpcMode": opts.last("--ipc", "private"),
            "ShmSize": cli.ram_in_bytes(opts.last("--shm-size", "64m") or "", "--shm-size"),
            "Binds": opts.all("--volume") or None,
            "RestartPolicy": {"Name": opts.last("--restart", "no"), "MaximumRetryCount": 0},
            "Privileged": "--privileged" in opts.flags,
            "Ulimits": cli.parse_ulimits(opts.all("--ulimit")),
            "CapAdd": cli.parse_caps(opts.all("--cap-add")),
            "SecurityOpt": opts.all("--security-opt") or None,
            "Devices": devices,
            "Memory": memory,
            "MemorySwap": swap,
            "OomScoreAdj": cli.parse_oom_score_adj(opts.last("--oom-score-adj")),
            "DeviceRequests": cli.device_requests(opts.last("--gpus")),
            "AutoRemove": "--rm" in opts.flags,
        }

    def reap_auto_removed(self) -> None:
        for name, c in list(self.containers.items()):
            if c.auto_remove and not c.running:
                del self.containers[name]

    async def ps(self, args: list[str]) -> Result:
        aliases = {"-a": "--all", "-q": "--quiet", "-f": "--filter", "-s": "--size"}
        values, flags = (
            cli.words("--filter -f --format"),
            cli.words("-a --all -q --quiet --no-trunc -s --size"),
        )
        opts = cli.parse_options(args, values, flags, "ps", aliases)
        if opts.positionals:
            raise CliError("\"docker ps\" accepts no arguments.\nSee 'docker ps --help'.", 1)
        self.reap_auto_removed()
        rows = []
        for c in sorted(self.containers.values(), key=lambda c: c.created, reverse=True):
            if not c.running and "--all" not in opts.flags:
                continue
            fields = {"labels": c.labels, "name": c.name, "id": c.id, "status": c.status}
            if cli.matches_filters(opts.all("--filter"), fields):
                rows.append(c)
        full = "--no-trunc" in opts.flags
        if "--quiet" in opts.flags:
            lines = [c.id if full else c.id[:12] for c in rows]
        elif (fmt := opts.last("--format")) is not None:
            lines = [cli.render_template(fmt, c.ps_row()) for c in rows]
        else:
            lines = cli.ps_table([c.ps_row() for c in rows])
        return 0, "".join(line + "\n" for line in lines), ""

    async def inspect(self, args: list[str]) -> Result:
        aliases = {"-f": "--format", "-s": "--size"}
        opts = cli.parse_options(args, cli.words("--format -f --type"), cli.words("-s --size"), "inspect", aliases)
        if not opts.positionals:
            raise CliError("\"docker inspect\" requires at least 1 argument.\nSee 'docker inspect --help'.", 1)
        kind = opts.last("--type")
        found, errors = [], []
        for ref in opts.positionals:
            container = self.find(ref) if kind in (None, "container") else None
            if container is not None:
                found.append(container.inspect())
                continue
            if kind in (None, "image") and self.local_image(ref) is not None:
                found += json.loads(self.image_inspect([ref])[1])
                continue
            errors.append(f"Error: No such {'object' if kind is None else kind}: {ref}")
        return self._listing(found, errors, opts.last("--format"))

    @staticmethod
    def _listing(found: list[dict[str, Any]], errors: list[str], fmt: str | None) -> Result:
        if fmt is not None:
            out = "".join(cli.render_template(fmt, obj) + "\n" for obj in found)
        else:
            out = json.dumps(found, indent=4) + "\n"
        return (1 if errors else 0), out, "".join(e + "\n" for e in errors)

    async def stop(self, args: list[str]) -> Result:
        aliases = {"-t": "--time", "-s": "--signal"}
        opts = cli.parse_options(args, cli.words("--time -t --signal -s"), frozenset(), "stop", aliases)
        timeout = float(opts.last("--time", "10") or 10)
        return await self._each(opts.positionals, lambda c: self._gpu_after(c, c.stop(timeout)), "stop")

    async def _gpu_after(self, c: SimContainer, ending: Awaitable[None]) -> None:
        """End a container; one that had the GPU leaves it held for `gpu_release_s` (CUDA context teardown)."""
        had_gpu = c.running and c.host_config.get("DeviceRequests") is not None
        await ending
        if had_gpu and not c.running:
            self.gpu_held_until = max(self.gpu_held_until, time.monotonic() + self.gpu_release_s)

    def gpu_held_for(self) -> float:
        """Seconds until the GPU is free of every ended container's context (0: free now)."""
        return max(0.0, self.gpu_held_until - time.monotonic())

    async def rm(self, args: list[str]) -> Result:
        aliases = {"-f": "--force", "-v": "--volumes"}
        opts = cli.parse_options(args, frozenset(), cli.words("-f --force -v --volumes"), "rm", aliases)
        force = "--force" in opts.flags

        async def remove(c: SimContainer) -> None:
            if c.running and not force:
                raise CliError(
                    f'Error response from daemon: cannot remove container "/{c.name}": container is running: '
                    "stop the container before removing or force remove",
                    1,
                )
            await self._gpu_after(c, c.kill())
            self.containers.pop(c.name, None)
            c.log_path.unlink(missing_ok=True)  # docker drops a container's logs with it

        # The docker CLI treats a missing container as removed under --force (it still says so on stderr).
        return await self._each(opts.positionals, remove, "rm", missing_ok=force)

    async def _each(
        self,
        refs: list[str],
        action: Callable[[SimContainer], Awaitable[None]],
        command: str,
        *,
        missing_ok: bool = False,
    ) -> Result:
        if not refs:
            raise CliError(f"\"docker {command}\" requires at least 1 argument.\nSee 'docker {command} --help'.", 1)
        out, err, failed = [], [], False
        for ref in refs:
            container = self.find(ref)
            if container is None:
                # `rm -f` still prints the error, but a missing container does not fail it.
                err.append(f"Error response from daemon: No such container: {ref}")
                failed = failed or not missing_ok
                continue
            try:
                await action(container)
            except CliError as exc:
                err.append(exc.message)
                failed = True
                continue
            out.append(ref)
        return (1 if failed else 0), "".join(o + "\n" for o in out), "".join(e + "\n" for e in err)

    async def logs(self, args: list[str]) -> Result:
        aliases = {"-n": "--tail", "-f": "--follow", "-t": "--timestamps"}
        values, flags = (
            cli.words("--tail -n --since --until"),
            cli.words("-f --follow -t --timestamps --details"),
        )
        opts = cli.parse_options(args, values, flags, "logs", aliases)
        if "--follow" in opts.flags:
            raise CliError("sim: docker logs --follow is not supported", 1)
        if len(opts.positionals) != 1:
            raise CliError("\"docker logs\" requires exactly 1 argument.\nSee 'docker logs --help'.", 1)
        container = self.find(opts.positionals[0])
        if container is None:
            raise CliError(f"Error response from daemon: No such container: {opts.positionals[0]}", 1)
        try:
            lines = container.log_path.read_text(errors="replace").splitlines(keepends=True)
        except FileNotFoundError:
            lines = []
        tail = opts.last("--tail", "all") or "all"
        if tail != "all":
            if not tail.lstrip("-").isdigit():
                raise CliError(f'invalid value "{tail}" for flag --tail', 1)
            lines = lines[-int(tail) :] if int(tail) > 0 else []
        return 0, "".join(lines), ""
