"""Host operations of a lane transaction, each one argv over the transport.

Kept apart from the transaction logic so every remote command lanes runs goes
through one place. The commands themselves and the reading of what they print
are the pure functions of `reconciler.facts` (`facts.docker` for docker,
`facts.commands` for the rest): this module only sends them and decides what
a failure means here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Mapping, Sequence

from reconciler.engines.launcher import describe_missing
from reconciler.errors import (
    DigestMismatchError,
    GpuBusyError,
    HostUnreachableError,
    ImageLacksLauncherError,
    LanesError,
    PermanentError,
    RemoteCommandError,
    TransientError,
)
from reconciler.facts import docker
from reconciler.facts.commands import (
    dropcaches_argv,
    envfile_argv,
    envfile_remove_argv,
    gpufree_argv,
    lease_argv,
)
from reconciler.facts.container import ContainerSpec
from reconciler.facts.imagecheck import LAUNCHER_MISSING_EXIT, launcher_check_argv, missing_from
from reconciler.facts.lease_script import LEASE_CONFLICT_EXIT
from reconciler.facts.parse import parse_lease_output
from reconciler.transport.base import CommandResult, HostTarget, Transport

LIVENESS_TIMEOUT_S = 5.0
"""How long a host that already failed a command in this cycle gets to answer a `true` before the next one.

A cut link does not refuse commands, it swallows them: each would wait out the full command timeout
(60 s), and a rollback sends several to every host. After one such failure the host is asked first.
"""


class LeaseHeldError(TransientError):
    """Another reconciler holds the host's lease: wait for it to finish (or for the lease to expire)."""

    delay_s = 2.0
    """The first wait of a lane it blocks (doubling while it stays blocked, `reconciler.lane.lease_delay`): the
    holder gives the lease back as its transaction ends, so the lane is looked at again soon, not at expiry."""

    def __init__(self, host: str, holder: str, expires: float) -> None:
        self.host = host
        self.holder = holder
        self.expires = expires
        super().__init__(f"{host} is leased by {holder} until {expires:.0f}")


class HostOps:
    def __init__(
        self,
        transport: Transport,
        targets: Mapping[str, HostTarget],
        *,
        timeout: float = 60.0,
        pull_timeout: float = 1800.0,
        stop_timeout_s: int = 30,
    ) -> None:
        self.transport = transport
        self.targets = targets
        self.timeout = timeout
        self.pull_timeout = pull_timeout
        self.stop_timeout_s = stop_timeout_s
        self.suspect: dict[str, str] = {}
        """Hosts that timed out or dropped a connection in this cycle (HostOps lives for one), and why."""

    async def run(
        self, host: str, argv: list[str], *, input: str | None = None, timeout: float | None = None, check: bool = True
    ) -> str:
        result = await self._call(host, argv, input=input, timeout=timeout or self.timeout, check=check)
        return result.stdout

    async def call(self, host: str, argv: list[str], *, timeout: float) -> CommandResult:
        """A command whose exit status and stderr the caller reads itself (a one-off parsing container)."""
        return await self._call(host, argv, timeout=timeout, check=False)

    async def _call(
        self, host: str, argv: list[str], *, input: str | None = None, timeout: float, check: bool
    ) -> CommandResult:
        """Every command goes through here: a host that failed to answer before is asked if it is back first."""
        if host in self.suspect:
            await self._still_there(host)
        try:
            return await self.transport.run(self.targets[host], argv, input=input, timeout=timeout, check=check)
        except HostUnreachableError as exc:
            self.suspect[host] = exc.reason
            raise

    async def _still_there(self, host: str) -> None:
        limit = min(LIVENESS_TIMEOUT_S, self.timeout)
        try:
            # Any exit status is an answer: only silence means the host is still gone.
            await self.transport.run(self.targets[host], ["true"], timeout=limit, check=False)
        except HostUnreachableError as exc:
            earlier = self.suspect[host]
            raise HostUnreachableError(host, f"{earlier}; still not answering ({exc.reason}), so not sent") from None
        self.suspect.pop(host, None)

    async def acquire_lease(self, host: str, lease_file: str, owner: str, ttl_s: int) -> None:
        argv = lease_argv("acquire", lease_file, owner, ttl_s)
        result = await self._call(host, argv, timeout=self.timeout, check=False)
        outcome = parse_lease_output(result.stdout) if result.stdout.strip() else None
        if result.exit_status == LEASE_CONFLICT_EXIT and outcome is not None and outcome.lease is not None:
            raise LeaseHeldError(host, outcome.lease.owner, outcome.lease.expires)
        if result.exit_status != 0 or outcome is None or not outcome.ok:
            holder = outcome.lease.owner if outcome and outcome.lease else "unknown"
            raise PermanentError(f"{host}: lease held by {holder} ({result.stderr.strip() or 'busy'})")

    async def release_lease(self, host: str, lease_file: str, owner: str) -> None:
        # An expiring lease frees the host anyway, so a failed release is not an error.
        with contextlib.suppress(LanesError):
            # Short: a host that vanished mid-apply must not hold the result back for a full command timeout.
            await self._call(
                host, lease_argv("release", lease_file, owner, 0), timeout=min(self.timeout, 10.0), check=False
            )

    async def pull(self, host: str, image: str) -> tuple[str, ...]:
        """Pull, verify the pinned digest; the pulled image's environment (empty for an unpinned image)."""
        await self.run(host, docker.pull_argv(image), timeout=self.pull_timeout)
        digest = docker.pinned_digest(image)
        if digest is None:
            return ()
        out = await self.run(host, docker.image_inspect_argv(image))
        try:
            images = docker.parse_image_inspect(out)
        except docker.DockerOutputError:
            raise DigestMismatchError(f"{host}: cannot read the digest of {image} after pulling it") from None
        if not docker.has_digest(images, digest):
            raise DigestMismatchError(f"{host}: pulled {image} but its digests are {docker.repo_digests(images)}")
        return images[0].env if images else ()

    async def write_env_file(self, host: str, path: str, content: str) -> None:
        await self.run(host, envfile_argv(path), input=content)

    async def remove_env_files(self, host: str, paths: Sequence[str]) -> None:
        await self.run(host, envfile_remove_argv(paths))

    async def stop_remove(self, host: str, name: str) -> None:
        await self.run(
            host, docker.stop_argv(name, self.stop_timeout_s), timeout=self.stop_timeout_s + self.timeout, check=False
        )
        await self.run(host, docker.rm_argv(name), check=False)

    async def start(self, host: str, spec: ContainerSpec) -> None:
        await self.run(host, docker.run_argv(spec))

    async def drop_caches(self, host: str) -> None:
        await self.run(host, dropcaches_argv(), check=False)

    async def check_launcher(self, host: str, image: str, needs: Sequence[str]) -> None:
        """Run the image once with no network: ImageLacksLauncherError when it lacks what the lane launches."""
        result = await self._call(host, launcher_check_argv(image, needs), timeout=self.timeout, check=False)
        if result.exit_status == 0:
            return
        missing = missing_from(result.stdout)
        if result.exit_status == LAUNCHER_MISSING_EXIT and missing:
            raise ImageLacksLauncherError(f"{host}: {image}: {describe_missing(missing)}")
        raise RemoteCommandError(host, launcher_check_argv(image, needs)[:8], result.exit_status, result.stderr)

    async def wait_gpu_free(self, host: str, timeout_s: float) -> float:
        """Seconds waited until the host's GPU was free (0 with no GPU); GpuBusyError naming the holders."""
        result = await self._call(host, gpufree_argv(timeout_s), timeout=timeout_s + self.timeout, check=False)
        try:
            answer = json.loads(result.stdout.strip().splitlines()[-1])
            waited = float(answer["waited_s"])
            gpu = str(answer["gpu"])
        except (IndexError, ValueError, KeyError, TypeError):
            raise RemoteCommandError(host, ["lanes-gpufree"], result.exit_status, result.stderr) from None
        if gpu == "busy":
            holders = ", ".join(f"pid {b.get('pid')} ({b.get('name') or '?'})" for b in answer.get("busy", []))
            raise GpuBusyError(f"{host}: the GPU was still held after {waited:.0f} s by {holders}")
        return waited

    async def state(self, host: str, name: str) -> str:
        out = await self.run(host, docker.inspect_argv(name), check=False)
        try:
            state = docker.container_state(out)
        except docker.DockerOutputError:
            # Not docker's output (a host without docker prints nothing): as before, no container to watch.
            return "missing"
        return "missing" if state is None else state

    async def logs(self, host: str, name: str, tail: int) -> str:
        try:
            result = await self._call(host, docker.logs_argv(name, tail), timeout=self.timeout, check=False)
        except LanesError as exc:
            return f"(logs unavailable: {exc})"
        return (result.stdout + result.stderr)[-8000:]


async def gather_hosts(coros: Sequence[Awaitable[object]]) -> list[BaseException]:
    """Run per-host operations in parallel; return their errors instead of raising the first."""
    results = await asyncio.gather(*coros, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    for err in errors:
        if isinstance(err, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
            raise err
    return errors
