"""Simulated Sparks over real SSH: pinned host keys, per-host addresses, unreachable hosts."""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import asyncssh
import httpx
import pytest

from reconciler.facts import commands as fc
from reconciler.facts.parse import parse_probe
from reconciler.sim.registry import SimImage, SimRegistry
from reconciler.sim.sshd import SimFleet

from .conftest import Eventually, process_gone

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def image(registry: SimRegistry) -> SimImage:
    return registry.add("lmsysorg/sglang:v0.5.22-cu130")


@pytest.fixture
async def fleet(registry: SimRegistry, tmp_path: Path) -> AsyncIterator[SimFleet]:
    async with SimFleet(["spark1", "spark2"], registry=registry, work_dir=tmp_path / "fleet") as fleet:
        yield fleet
        runtimes = [fleet.runtime(n) for n in fleet.names]
    assert [pid for rt in runtimes for pid in rt.alive_pids()] == []


async def _run(fleet: SimFleet, name: str, argv: list[str], stdin: str | None = None) -> asyncssh.SSHCompletedProcess:
    async with asyncssh.connect(**fleet.connect_options(name)) as conn:
        return await conn.run(shlex.join(argv), input=stdin, check=False)


async def test_hosts_have_their_own_addresses_and_pinned_keys(fleet: SimFleet) -> None:
    (a1, p1, u1), (a2, p2, u2) = fleet.targets["spark1"], fleet.targets["spark2"]
    assert (a1, a2) == ("127.77.0.1", "127.77.0.2")
    assert p1 == p2
    assert u1 == u2 == "lanes"
    lines = fleet.known_hosts_path.read_text().splitlines()
    assert [line.split()[0] for line in lines] == [f"[127.77.0.1]:{p1}", f"[127.77.0.2]:{p1}"]
    assert oct(fleet.client_key_path.stat().st_mode & 0o777) == "0o600"


async def test_docker_and_probe_over_ssh(fleet: SimFleet) -> None:
    for name in ("spark1", "spark2"):
        result = await _run(fleet, name, ["docker", "ps", "-a", "--filter", "label=lanes.managed=true", "-q"])
        assert (result.exit_status, result.stdout, result.stderr) == (0, "", "")
        probe = await _run(fleet, name, fc.probe_argv(["/srv/models/x"], "/var/lib/lanes/lease.json", "/srv"))
        assert probe.exit_status == 0
        assert isinstance(probe.stdout, str)
        host = parse_probe(name, probe.stdout)
        assert host.hostname == name
        assert fleet.targets[name][1] in host.listening  # its own sshd, on its own address
    assert [argv[0] for argv in fleet.commands_seen("spark1")] == ["docker", "python3"]
    result = await _run(fleet, "spark1", ["docker", "inspect", "nope"])
    assert (result.exit_status, result.stderr) == (1, "Error: No such object: nope\n")
    result = await _run(fleet, "spark1", ["rocm-smi"])
    assert result.exit_status == 127


async def test_same_engine_port_on_two_hosts(
    fleet: SimFleet, image: SimImage, port: int, eventually: Eventually
) -> None:
    env_path = "/etc/lanes/env/l1.env"
    for name in ("spark1", "spark2"):
        written = await _run(fleet, name, fc.envfile_argv(env_path), stdin="HF_TOKEN=secret\n")
        assert written.exit_status == 0
        assert fleet.runtime(name).envfiles[env_path].content == "HF_TOKEN=secret\n"
        run = [
            "docker",
            "run",
            "-d",
            "--name",
            "l1",
            "--env-file",
            env_path,
            "--network",
            "host",
            image.pinned,
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "/m",
            "--served-model-name",
            name,
            "--port",
            str(port),
        ]
        started = await _run(fleet, name, run)
        assert started.exit_status == 0, started.stderr
    # The secret went through stdin, never on a command line.
    assert all("secret" not in " ".join(argv) for n in fleet.names for argv in fleet.commands_seen(n))
    async with httpx.AsyncClient(timeout=5) as client:
        for name, (address, _, _) in fleet.targets.items():

            async def serves(address: str = address, name: str = name) -> bool:
                try:
                    response = await client.get(f"http://{address}:{port}/v1/models")
                except httpx.TransportError:
                    return False
                return [m["id"] for m in response.json()["data"]] == [name]

            await eventually(serves, 10)


async def test_stopped_host_is_unreachable_until_started(fleet: SimFleet) -> None:
    async with asyncssh.connect(**fleet.connect_options("spark2")) as conn:
        await fleet.stop_host("spark2")
        with pytest.raises((asyncssh.Error, OSError)):
            await conn.run("docker ps", check=True)
    with pytest.raises(ConnectionRefusedError):
        await asyncssh.connect(**fleet.connect_options("spark2"))
    assert (await _run(fleet, "spark1", ["docker", "ps", "-q"])).exit_status == 0
    await fleet.start_host("spark2")
    assert (await _run(fleet, "spark2", ["docker", "ps", "-q"])).exit_status == 0


async def test_replaced_host_key_is_refused(fleet: SimFleet) -> None:
    await fleet.replace_host_key("spark2")
    with pytest.raises(asyncssh.HostKeyNotVerifiable):
        await asyncssh.connect(**fleet.connect_options("spark2"))
    assert fleet.commands_seen("spark2") == []
    assert (await _run(fleet, "spark1", ["docker", "ps", "-q"])).exit_status == 0


async def test_other_user_and_other_key_are_refused(fleet: SimFleet, tmp_path: Path) -> None:
    options = fleet.connect_options("spark1")
    with pytest.raises(asyncssh.PermissionDenied):
        await asyncssh.connect(**{**options, "username": "root"})
    stranger = asyncssh.generate_private_key("ssh-ed25519")
    with pytest.raises(asyncssh.PermissionDenied):
        await asyncssh.connect(**{**options, "client_keys": [stranger]})
    assert fleet.commands_seen("spark1") == []


async def test_close_ends_every_container(registry: SimRegistry, image: SimImage, tmp_path: Path, port: int) -> None:
    async with SimFleet(["a", "b"], base_address="127.77.3.", registry=registry, work_dir=tmp_path / "f") as fleet:
        for name in fleet.names:
            result = await _run(fleet, name, ["docker", "run", "-d", image.pinned, "serve", "m", "--port", str(port)])
            assert result.exit_status == 0
        pids = [pid for n in fleet.names for pid in fleet.runtime(n).alive_pids()]
        assert len(pids) == 2
    assert all(process_gone(pid) for pid in pids)
    with pytest.raises(ConnectionRefusedError):
        await asyncssh.connect(**fleet.connect_options("a"))


async def test_a_client_giving_up_hangs_up_its_command_as_sshd_does(
    fleet: SimFleet, registry: SimRegistry, image: SimImage
) -> None:
    registry.pull_delay_s = 0.5
    async with asyncssh.connect(**fleet.connect_options("spark1")) as conn:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(conn.run(shlex.join(["docker", "pull", image.pinned])), 0.1)
    await asyncio.sleep(0.6)  # long enough for the pull, had it not been hung up with the session
    registry.pull_delay_s = 0.0
    result = await _run(fleet, "spark1", ["docker", "image", "inspect", image.pinned])
    assert result.exit_status != 0  # never pulled: the host did not act for a client that left
    assert (await _run(fleet, "spark1", ["docker", "pull", image.pinned])).exit_status == 0
