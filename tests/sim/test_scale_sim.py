"""Big simulated fleets: addresses past one /24, and one shared stand-in process for every container."""

from __future__ import annotations

import asyncio
import os
import random
import shlex
import signal
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import asyncssh
import httpx
import pytest

from reconciler.facts import commands as fc
from reconciler.facts.parse import parse_probe
from reconciler.sim import shellwords
from reconciler.sim.fleetproc import FleetProcess
from reconciler.sim.netstat import ListeningTable
from reconciler.sim.registry import SimImage, SimRegistry
from reconciler.sim.sshd import SimFleet, host_addresses

from .conftest import Eventually, process_gone

pytestmark = pytest.mark.timeout(60)

BASE = "127.78.4."


def test_three_octet_base_keeps_its_addresses_and_spills_into_the_next_24() -> None:
    assert host_addresses("127.77.0.", 3) == ["127.77.0.1", "127.77.0.2", "127.77.0.3"]
    many = host_addresses("127.77.3.", 1000)
    assert many[:254] == [f"127.77.3.{i}" for i in range(1, 255)]  # what callers of up to 254 hosts always got
    assert many[254:256] == ["127.77.4.1", "127.77.4.2"]
    assert many[-1] == "127.77.6.238"  # 1000 = 3 x 254 + 238
    assert len(set(many)) == 1000


def test_two_octet_base_starts_at_block_zero_and_bad_bases_are_refused() -> None:
    assert host_addresses("127.90.", 255)[-2:] == ["127.90.0.254", "127.90.1.1"]
    assert host_addresses("127.90.", 0) == []
    with pytest.raises(ValueError, match="do not fit"):
        host_addresses("127.90.255.", 255)
    for bad in ("127.", "127.1.2.3.", "127.x.0.", "127.300."):
        with pytest.raises(ValueError, match="must look like"):
            host_addresses(bad, 1)


async def test_a_fleet_past_one_24_answers_ssh_on_every_block(registry: SimRegistry, tmp_path: Path) -> None:
    names = [f"h{i:03d}" for i in range(260)]
    async with SimFleet(names, base_address="127.78.1.", registry=registry, work_dir=tmp_path / "f") as fleet:
        assert fleet.targets["h253"].address == "127.78.1.254"
        assert fleet.targets["h254"].address == "127.78.2.1"
        assert len(fleet.known_hosts_path.read_text().splitlines()) == 260
        for name in ("h000", "h254", "h259"):
            async with asyncssh.connect(**fleet.connect_options(name)) as conn:
                result = await conn.run(shlex.join(["docker", "ps", "-q"]), check=False)
            assert result.exit_status == 0
            assert fleet.host(name).handshakes == 1
            assert fleet.targets[name].port in fleet.runtime(name).listening_ports()


@pytest.fixture
def image(registry: SimRegistry) -> SimImage:
    return registry.add("registry.lan:5000/vllm:v0.32.0")


@pytest.fixture
def image_ref() -> str:
    return "registry.lan:5000/vllm@sha256:" + "ab" * 32


@pytest.fixture
async def shared_fleet(registry: SimRegistry, tmp_path: Path) -> AsyncIterator[SimFleet]:
    fleet = SimFleet(["a", "b"], base_address=BASE, registry=registry, work_dir=tmp_path / "f", shared_standin=True)
    async with fleet:
        assert fleet.standin is not None
        pid = fleet.standin.pid
        yield fleet
    assert process_gone(pid)  # closing the fleet ends the shared process, by its pid
    assert [p for n in fleet.names for p in fleet.runtime(n).alive_pids()] == []


def _run(image: str, name: str, port: int, *extra: str, rank: str = "0") -> list[str]:
    return ["docker", "run", "-d", "--name", name, "--label", f"lanes.rank={rank}", *extra, image]


def _serve(port: int) -> list[str]:
    return ["vllm", "serve", "org/model", "--served-model-name", "m", "--port", str(port)]


async def _state(fleet: SimFleet, host: str, name: str) -> str:
    _, out, _ = await fleet.runtime(host).execute(
        ["docker", "ps", "-a", "--filter", f"name={name}", "--format", "{{.Status}}"]
    )
    return out.strip()


async def test_shared_standin_serves_each_head_rank_on_its_hosts_address(
    shared_fleet: SimFleet, image: SimImage, port: int
) -> None:
    assert shared_fleet.standin is not None
    for host in ("a", "b"):  # the same port on two hosts: each socket is bound to its own host's address
        status, out, _ = await shared_fleet.runtime(host).execute(_run(image.pinned, "l1-r0", port) + _serve(port))
        assert (status, len(out)) == (0, 65)  # the container id, as from a process-backed run
    status, _, _ = await shared_fleet.runtime("b").execute(_run(image.pinned, "l1-r1", port, rank="1") + _serve(port))
    assert status == 0
    for host in ("a", "b"):
        rt = shared_fleet.runtime(host)
        assert port in rt.listening_ports()
        assert {c.pid for c in rt.containers.values()} == {shared_fleet.standin.pid}  # no process per container
        address = shared_fleet.targets[host].address
        async with httpx.AsyncClient(base_url=f"http://{address}:{port}", timeout=5) as client:
            assert (await client.get("/health")).status_code == 200
            models = (await client.get("/v1/models")).json()
            assert [m["id"] for m in models["data"]] == ["m"]
    _, logs, _ = await shared_fleet.runtime("b").execute(["docker", "logs", "l1-r1"])
    assert "worker rank of m started; no HTTP" in logs
    _, logs, _ = await shared_fleet.runtime("a").execute(["docker", "logs", "l1-r0"])
    assert f"serving m on {shared_fleet.targets['a'].address}:{port}" in logs


async def test_stop_and_kill_end_the_socket_with_docker_exit_codes(
    shared_fleet: SimFleet, image: SimImage, port: int
) -> None:
    rt = shared_fleet.runtime("a")
    address = shared_fleet.targets["a"].address
    await rt.execute(_run(image.pinned, "l1-r0", port) + _serve(port))
    async with httpx.AsyncClient(base_url=f"http://{address}:{port}", timeout=5) as client:
        assert (await client.get("/health")).status_code == 200  # a kept-alive connection stays open
        assert await rt.execute(["docker", "stop", "l1-r0"]) == (0, "l1-r0\n", "")
        assert (await _state(shared_fleet, "a", "l1-r0")).startswith("Exited (0)")
        assert port not in rt.listening_ports()
        with pytest.raises(httpx.TransportError):  # the open connection was cut, as a dead engine's would be
            await client.get("/health")
    await rt.execute(["docker", "rm", "l1-r0"])
    await rt.execute(_run(image.pinned, "l1-r0", port) + _serve(port))
    assert port in rt.listening_ports()
    status, _, _ = await rt.execute(["docker", "rm", "-f", "l1-r0"])
    assert status == 0
    assert port not in rt.listening_ports()
    assert rt.containers == {}


async def test_crash_and_a_taken_port_show_as_exited_1(
    shared_fleet: SimFleet, registry: SimRegistry, image: SimImage, port: int, eventually: Eventually
) -> None:
    rt = shared_fleet.runtime("a")
    crashing = registry.add("registry.lan:5000/vllm:bad", env={"STANDIN_CRASH_AFTER_S": "0.2"})
    await rt.execute(_run(crashing.pinned, "l1-r0", port) + _serve(port))

    async def crashed() -> bool:
        return (await _state(shared_fleet, "a", "l1-r0")).startswith("Exited (1)")

    await eventually(crashed, 5)
    assert port not in rt.listening_ports()
    _, logs, _ = await rt.execute(["docker", "logs", "l1-r0"])
    assert "crashing after 0.2 s" in logs
    with socket.socket() as taken:
        taken.bind((shared_fleet.targets["a"].address, 0))
        taken.listen()
        busy = taken.getsockname()[1]
        status, _, _ = await rt.execute(_run(image.pinned, "l2-r0", busy) + _serve(busy))
        assert status == 0  # docker run succeeds; the engine then fails to bind and exits, like a process would
        assert (await _state(shared_fleet, "a", "l2-r0")).startswith("Exited (1)")
        _, logs, _ = await rt.execute(["docker", "logs", "l2-r0"])
        assert f"cannot listen on {shared_fleet.targets['a'].address}:{busy}" in logs


async def test_containers_read_as_killed_when_the_shared_process_dies(
    shared_fleet: SimFleet, image: SimImage, port: int, eventually: Eventually
) -> None:
    assert shared_fleet.standin is not None
    rt = shared_fleet.runtime("b")
    await rt.execute(_run(image.pinned, "l1-r0", port) + _serve(port))
    os.kill(shared_fleet.standin.pid, signal.SIGKILL)

    async def killed() -> bool:
        return (await _state(shared_fleet, "b", "l1-r0")).startswith("Exited (137)")

    await eventually(killed, 5)
    status, _, err = await rt.execute(_run(image.pinned, "l2-r0", port) + _serve(port))
    assert status == 125  # docker's answer when its runtime cannot start a task
    assert "shared stand-in" in err


# -- the simulator's own speed-ups keep the semantics they replace ---------------------------

TRICKY = [
    "",
    "   ",
    "docker ps -q",
    "a  'b c'  \"d e\"",
    "it'\"'\"'s",
    "'' \"\" x''y",
    'a\\ b c\\\\d \\"',
    '"in \\"double\\" \\\\ \\$ \\n"',
    "'single \\ keeps' \"tab\there\"",
    "é\u00a0x\x0by",  # only space, tab, CR and LF separate words, as in shlex
    "line\none\r\ntwo",
    "unclosed 'quote",
    'unclosed "double',
    "trailing\\",
    '"ends in escape\\',
    "ab'cd",
]


@pytest.mark.parametrize("command", TRICKY)
def test_shellwords_split_is_shlex_split(command: str) -> None:
    try:
        expected: object = shlex.split(command)
    except ValueError as exc:
        with pytest.raises(ValueError, match=str(exc)):
            shellwords.split(command)
        return
    assert shellwords.split(command) == expected


def test_shellwords_split_inverts_shlex_join_and_agrees_on_random_strings() -> None:
    probe = fc.probe_argv(["/srv/models/a b", "/srv/models/it's"], "/var/lib/lanes/lease.json", "/root/.cache")
    assert shellwords.split(shlex.join(probe)) == probe
    rng = random.Random(1017)
    alphabet = " \t\n'\"\\ab$;é\u00a0"
    for _ in range(5000):
        argv = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6))) for _ in range(rng.randint(0, 4))]
        assert shellwords.split(shlex.join(argv)) == argv
        raw = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10)))
        try:
            expected: object = shlex.split(raw)
        except ValueError as exc:
            expected = str(exc)
        try:
            got: object = shellwords.split(raw)
        except ValueError as exc:
            got = str(exc)
        assert got == expected, raw


def test_a_shared_listening_table_is_read_once_until_invalidated() -> None:
    address = "127.78.6.1"
    fresh, shared = ListeningTable(), ListeningTable(max_age_s=60.0)
    with socket.socket() as server:
        server.bind((address, 0))
        port = server.getsockname()[1]
        assert port not in shared.ports(address)  # read once, before the socket listens
        server.listen()
        assert port in fresh.ports(address)  # age 0: the kernel's table at every call
        assert port not in shared.ports(address)  # still the first read
        assert shared.reads == 1
        shared.invalidate()
        assert port in shared.ports(address)
        assert shared.reads == 2
    assert port not in fresh.ports(address)


def test_fleet_process_counts_commands_and_ends_everything_it_started(tmp_path: Path, image_ref: str) -> None:
    spec = {
        "hosts": ["h1", "h2"],
        "base_address": "127.78.7.",
        "work_dir": str(tmp_path / "sim"),
        "images": {image_ref: {"STANDIN_LOAD_S": "0"}},
        "models": {"h1": [["/models/m", 1000]]},
    }
    fleet = FleetProcess(spec, tmp_path / "sim")
    try:
        ready = fleet.start(timeout=30)
        assert ready["addresses"] == {"h1": "127.78.7.1", "h2": "127.78.7.2"}
        assert fleet.counts() == {"h1": (0, 0, 0, 0, 0, 0), "h2": (0, 0, 0, 0, 0, 0)}

        async def two_commands() -> list[tuple[str, int]]:
            options = {
                "host": ready["addresses"]["h1"],
                "port": ready["port"],
                "username": "lanes",
                "client_keys": [ready["client_key"]],
                "known_hosts": ready["known_hosts"],
            }
            async with asyncssh.connect(**options) as conn:
                run = ["docker", "run", "-d", "--name", "r0", image_ref, *_serve(18000)]
                first = await conn.run(shlex.join(run), check=True)
                probe = fc.probe_argv(["/models/m"], "/var/lib/lanes/lease.json", "/models")
                second = await conn.run(shlex.join(probe), check=True)
            sent = len(shlex.join(run).encode()) + len(shlex.join(probe).encode())
            return [(str(first.stdout) + str(first.stderr), sent), (str(second.stdout), sent)]

        (run_out, sent), (probe_out, _) = asyncio.run(two_commands())
        assert 18000 in parse_probe("h1", probe_out).listening  # served by the shared stand-in, on h1's address
        # Bytes in: both command lines; out: both answers (docker run prints the pull and the id, the probe its JSON).
        received = len(run_out.encode()) + len(probe_out.encode())
        assert fleet.counts() == {"h1": (2, 1, sent, received, 2, 0), "h2": (0, 0, 0, 0, 0, 0)}
        pids = [fleet.pid, int(ready["standin_pid"])]
    finally:
        fleet.close(timeout=30)
    assert all(process_gone(pid) for pid in pids)


async def test_the_shared_standin_refuses_a_misspelled_flag_as_the_engine_would(
    shared_fleet: SimFleet, registry: SimRegistry, port: int
) -> None:
    # A release the flag tables know (the eugr lane's vLLM build), as `lanes demo` tags its images.
    versioned = registry.add("registry.lan:5000/vllm:eugr", env={"STANDIN_VERSION": "0.32.1.dev0+g8244d1c44"})
    rt = shared_fleet.runtime("a")
    status, _, _ = await rt.execute([*_run(versioned.pinned, "bad-r0", port), *_serve(port), "--kv-cache-dtpye", "x"])
    assert status == 0  # docker started the container; the engine inside refused its command line
    for _ in range(100):
        if (await _state(shared_fleet, "a", "bad-r0")).startswith("Exited (2)"):
            break
        await asyncio.sleep(0.05)
    assert (await _state(shared_fleet, "a", "bad-r0")).startswith("Exited (2)")
    _, logs, _ = await rt.execute(["docker", "logs", "bad-r0"])
    assert "error: unrecognized arguments: --kv-cache-dtpye x" in logs
