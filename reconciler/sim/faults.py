"""Host-side faults on simulated Sparks: what goes wrong with a real Spark, staged on a `SimFleet`.

The fault matrix (a host rebooted mid-apply, a link cut and restored, sshd
refusing our key, a replaced host key, a model path deleted) needs each fault
staged the same way in every test, and undone, so it lives here rather than
in each test. Everything goes through the fleet's public surface: the SSH
server of a host (`SimHost`), its runtime's containers and facts, the
known_hosts file the fleet wrote.

What each fault looks like from the control node:

- `reboot`: sshd goes away (open connections drop, new ones are refused),
  every engine process dies at once (SIGKILL: power is gone, nobody stops
  them), and docker comes back without them: `--restart no` containers of a
  host that was power-cycled are gone for lanes' purposes (`keep_records`
  leaves them listed as `exited`, like a docker whose state survived).
  `boot` brings sshd back; nothing restarts on its own.
- `cut_link`: the host keeps running, its containers keep serving, but it
  stops answering: open SSH connections drop and new ones hang (a
  `blackhole`, nothing ever answers the SYN'd connection, so a client
  waits for its connect timeout) or are refused. `restore_link` heals it.
- `refuse_key`: authorized_keys no longer lists the reconciler's key. Open
  connections are dropped so the next command has to log in again (an
  authenticated session would outlive an edit of authorized_keys).
- `replace_host_key`: the host comes back with a new host key; known_hosts
  still pins the old one, so a client must refuse it. `repin_host_key`
  writes the new key to known_hosts, as a person does after checking it.
- `remove_model`: a model path deleted on one host (`restore_model` puts it
  back, as a re-download would).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

import asyncssh

from reconciler.sim.sshd import SimFleet, SimHost

EXIT_AFTER_POWER_LOSS = 255  # what docker shows for a container that was running when the host went down


class HostFaults:
    """Stage and undo host-side faults on the hosts of one `SimFleet`."""

    def __init__(self, fleet: SimFleet) -> None:
        self.fleet = fleet
        self._blackholes: dict[str, socket.socket] = {}
        self._keys: dict[str, asyncssh.SSHAuthorizedKeys] = {}
        self._models: dict[tuple[str, str], int] = {}

    # -- reboot ------------------------------------------------------------------

    async def reboot(self, host: str, *, keep_records: bool = False) -> list[str]:
        """Power-cycle `host` and leave it down: sshd stopped, engines killed. Returns the containers lost."""
        await self.fleet.stop_host(host)
        runtime = self.fleet.runtime(host)
        lost = sorted(name for name, c in runtime.containers.items() if c.running)
        await asyncio.gather(*(c.kill() for c in runtime.containers.values()))
        if keep_records:
            for name in lost:
                runtime.containers[name].exit_code = EXIT_AFTER_POWER_LOSS
        else:
            runtime.containers.clear()
        return lost

    async def boot(self, host: str) -> None:
        """sshd answers again after a reboot (nothing else starts by itself: `--restart no`)."""
        await self.fleet.start_host(host)

    # -- the link ----------------------------------------------------------------

    async def cut_link(self, host: str, *, blackhole: bool = True) -> None:
        """`host` stops answering; its containers keep running. See the module docstring."""
        await self.fleet.stop_host(host)
        if blackhole:
            sim = self.fleet.host(host)
            hole = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            hole.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                hole.bind((sim.address, sim.port))
                hole.listen(64)  # never accepted: the kernel completes the handshake and nothing ever talks
            except OSError:
                hole.close()
                raise
            self._blackholes[host] = hole

    async def restore_link(self, host: str) -> None:
        hole = self._blackholes.pop(host, None)
        if hole is not None:
            hole.close()  # the connections stuck in its queue are reset, as when a cable comes back
        await self.fleet.start_host(host)

    # -- keys --------------------------------------------------------------------

    async def refuse_key(self, host: str) -> None:
        """authorized_keys on `host` lists some other key, not ours; open sessions are dropped."""
        sim = self.fleet.host(host)
        self._keys.setdefault(host, sim.authorized_keys)
        stranger = asyncssh.generate_private_key("ssh-ed25519", comment=f"not-lanes@{host}")
        sim.authorized_keys = asyncssh.import_authorized_keys(stranger.export_public_key().decode())
        await _drop_connections(sim)

    def accept_key(self, host: str) -> None:
        """Our key is back in authorized_keys."""
        saved = self._keys.pop(host, None)
        if saved is not None:
            self.fleet.host(host).authorized_keys = saved

    async def replace_host_key(self, host: str) -> None:
        await self.fleet.replace_host_key(host)

    def repin_host_key(self, host: str) -> None:
        """Pin `host`'s current key in the fleet's known_hosts (the other hosts' lines are kept)."""
        lines = []
        for name in self.fleet.names:
            sim = self.fleet.host(name)
            where = sim.address if sim.port == 22 else f"[{sim.address}]:{sim.port}"
            algorithm, key = sim.host_key.export_public_key().decode().split()[:2]
            lines.append(f"{where} {algorithm} {key}\n")
        self.fleet.known_hosts_path.write_text("".join(lines))

    # -- model files ---------------------------------------------------------------

    def remove_model(self, host: str, path: str) -> None:
        models = self.fleet.runtime(host).facts.models
        if path in models:
            self._models[(host, path)] = models.pop(path)

    def restore_model(self, host: str, path: str) -> None:
        size = self._models.pop((host, path), None)
        if size is not None:
            self.fleet.runtime(host).add_model_path(path, size)

    # -- undo ----------------------------------------------------------------------

    async def heal(self) -> None:
        """Undo every fault still staged: links, keys and models (a rebooted host is booted)."""
        for host in list(self._blackholes):
            await self.restore_link(host)
        for host in list(self._keys):
            self.accept_key(host)
        for host, path in list(self._models):
            self.restore_model(host, path)
        for name in self.fleet.names:
            if not self.fleet.host(name).serving:
                with contextlib.suppress(OSError):
                    await self.fleet.start_host(name)


async def _drop_connections(sim: SimHost) -> None:
    for conn in list(sim.connections):
        conn.close()
        with contextlib.suppress(Exception):
            await conn.wait_closed()
