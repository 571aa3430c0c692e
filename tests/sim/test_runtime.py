"""The simulated docker and host facts, driven directly (no SSH): semantics, errors, real processes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from reconciler.facts import commands as fc
from reconciler.facts.parse import parse_lease_output, parse_probe
from reconciler.sim.hostfacts import GIB
from reconciler.sim.registry import SimImage, SimRegistry
from reconciler.sim.runtime import SimContainerRuntime

from .conftest import Eventually, process_gone

pytestmark = pytest.mark.timeout(60)

ADDRESS = "127.77.9.1"
MISSING = "registry.lan:5000/vllm@sha256:" + "0" * 64


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def image(registry: SimRegistry) -> SimImage:
    return registry.add("registry.lan:5000/vllm:v0.32.0", env={"STANDIN_TG_TPS": "500"})


@pytest.fixture
async def runtime(registry: SimRegistry, tmp_path: Path, clock: Clock) -> AsyncIterator[SimContainerRuntime]:
    rt = SimContainerRuntime("spark9", ADDRESS, registry, tmp_path / "spark9", clock=clock)
    yield rt
    await rt.shutdown()
    assert rt.alive_pids() == []


def _run_argv(image: str, name: str, port: int, *extra: str, rank: str = "0") -> list[str]:
    return [
        "docker",
        "run",
        "-d",
        "--name",
        name,
        "--label",
        "lanes.managed=true",
        "--label",
        "lanes.lane=l1",
        "--label",
        f"lanes.rank={rank}",
        "--label",
        "lanes.spec=abc",
        "--gpus",
        "all",
        "--network",
        "host",
        "--ipc",
        "host",
        "--restart",
        "no",
        *extra,
        image,
        "vllm",
        "serve",
        "/m/q",
        "--port",
        str(port),
        "--served-model-name",
        "q",
    ]


async def test_pull_by_digest_and_errors(runtime: SimContainerRuntime, image: SimImage) -> None:
    status, out, err = await runtime.execute(["docker", "pull", image.pinned])
    assert (status, err) == (0, "")
    assert f"Digest: {image.digest}" in out
    status, out, _ = await runtime.execute(["docker", "pull", image.pinned])
    assert "Image is up to date" in out
    status, _, err = await runtime.execute(["docker", "pull", "registry.lan:5000/vllm@sha256:" + "0" * 64])
    assert status == 1
    assert err.startswith("Error response from daemon: manifest for registry.lan:5000/vllm@sha256:000")
    assert "manifest unknown" in err
    status, _, err = await runtime.execute(["docker", "pull", "nobody/nothing:1"])
    assert status == 1
    assert "pull access denied for nobody/nothing" in err
    status, out, err = await runtime.execute(["docker", "image", "inspect", image.pinned])
    assert status == 0
    [info] = json.loads(out)
    assert (info["Id"], info["RepoDigests"], info["Architecture"]) == (
        image.image_id,
        [image.pinned],
        "arm64",
    )
    status, out, err = await runtime.execute(["docker", "image", "inspect", "registry.lan:5000/vllm:v0.31"])
    assert (status, json.loads(out), err.strip()) == (
        1,
        [],
        "Error: No such image: registry.lan:5000/vllm:v0.31",
    )


async def test_run_ps_inspect_logs_stop_rm(
    runtime: SimContainerRuntime, image: SimImage, port: int, eventually: Eventually
) -> None:
    status, out, err = await runtime.execute(_run_argv(image.pinned, "l1-r0", port, "-e", "HF_HOME=/hf"))
    assert status == 0, err
    assert "Unable to find image" in err  # pulled implicitly, like docker
    cid = out.strip()
    assert len(cid) == 64

    async with httpx.AsyncClient(timeout=5) as client:

        async def ready() -> bool:
            try:
                return (await client.get(f"http://{ADDRESS}:{port}/health")).status_code == 200
            except httpx.TransportError:
                return False

        await eventually(ready, 10)

    status, out, _ = await runtime.execute(["docker", "ps", "--filter", "label=lanes.managed=true", "-q"])
    assert out == cid[:12] + "\n"
    status, out, _ = await runtime.execute(["docker", "ps", "-a", "--format", "{{json .}}"])
    row = json.loads(out)
    assert (row["Names"], row["State"], row["ID"]) == ("l1-r0", "running", cid[:12])
    assert "lanes.lane=l1" in row["Labels"].split(",")
    status, out, _ = await runtime.execute(["docker", "ps", "--format", "{{.Names}}\\t{{.State}}"])
    assert out == "l1-r0\trunning\n"

    status, out, _ = await runtime.execute(["docker", "inspect", "l1-r0"])
    [info] = json.loads(out)
    assert info["Id"] == cid
    assert info["Name"] == "/l1-r0"
    assert info["Image"] == image.image_id
    assert info["Config"]["Image"] == image.pinned
    assert info["Config"]["Labels"]["lanes.spec"] == "abc"
    assert info["Config"]["Env"] == ["STANDIN_TG_TPS=500", "HF_HOME=/hf"]
    assert info["Config"]["Cmd"][:3] == ["vllm", "serve", "/m/q"]
    assert info["State"]["Running"] is True
    assert info["HostConfig"]["NetworkMode"] == "host"
    status, out, _ = await runtime.execute(["docker", "inspect", "-f", "{{.State.Status}} {{.Config.Labels}}", cid[:8]])
    assert out.startswith("running map[lanes.lane:l1 ")
    assert runtime.listening_ports() == [port]

    status, out, _ = await runtime.execute(["docker", "logs", "--tail", "1", "l1-r0"])
    assert out.count("\n") == 1
    assert "loaded" in out
    status, out, _ = await runtime.execute(["docker", "logs", "l1-r0"])
    assert f"serving q on {ADDRESS}:{port}" in out

    status, out, err = await runtime.execute(["docker", "rm", "l1-r0"])
    assert status == 1
    assert "container is running" in err
    status, out, _ = await runtime.execute(["docker", "stop", "-t", "5", "l1-r0"])
    assert (status, out) == (0, "l1-r0\n")
    status, out, _ = await runtime.execute(
        ["docker", "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", "l1-r0"]
    )
    assert out == "exited 0\n"
    status, out, _ = await runtime.execute(["docker", "ps", "-q"])
    assert out == ""
    status, out, _ = await runtime.execute(["docker", "rm", "l1-r0"])
    assert (status, out) == (0, "l1-r0\n")
    status, out, err = await runtime.execute(["docker", "inspect", "l1-r0"])
    assert (status, json.loads(out), err) == (1, [], "Error: No such object: l1-r0\n")


async def test_run_errors(runtime: SimContainerRuntime, image: SimImage, port: int) -> None:
    status, _, err = await runtime.execute(_run_argv(MISSING, "l9-r0", port))
    assert status == 125
    assert "Unable to find image" in err
    assert "manifest unknown" in err
    assert runtime.containers == {}
    status, _, err = await runtime.execute(["docker", "run", "-d", "--bogus", image.pinned])
    assert (status, err.splitlines()[0]) == (125, "unknown flag: --bogus")
    status, _, err = await runtime.execute(["docker", "run", "--name", "x", image.pinned])
    assert status == 125
    status, _, err = await runtime.execute(["docker", "run", "-d", "--env-file", "/etc/lanes/none.env", image.pinned])
    assert status == 125
    assert "no such file" in err
    status, _, err = await runtime.execute(["docker", "run", "-d", "--name", "bad name", image.pinned])
    assert (status, "Invalid container name" in err) == (125, True)
    status, _, _ = await runtime.execute(_run_argv(image.pinned, "dup", port))
    assert status == 0
    status, _, err = await runtime.execute(_run_argv(image.pinned, "dup", port))
    assert status == 125
    assert 'Conflict. The container name "/dup" is already in use' in err
    for argv in (["docker", "stop", "nope"], ["docker", "logs", "nope"], ["docker", "rm", "nope"]):
        status, _, err = await runtime.execute(argv)
        assert (status, err) == (1, "Error response from daemon: No such container: nope\n")
    assert (await runtime.execute(["docker", "rm", "-f", "nope"]))[0] == 0
    status, _, err = await runtime.execute(["docker", "frobnicate"])
    assert status == 1
    assert "is not a docker command" in err


async def test_rm_force_really_ends_the_process(runtime: SimContainerRuntime, image: SimImage, port: int) -> None:
    await runtime.execute(_run_argv(image.pinned, "l1-r0", port))
    pid = runtime.containers["l1-r0"].pid
    assert runtime.alive_pids() == [pid]
    status, out, _ = await runtime.execute(["docker", "rm", "-f", "l1-r0"])
    assert (status, out) == (0, "l1-r0\n")
    assert runtime.alive_pids() == []
    assert process_gone(pid)  # killed and reaped, not a zombie


async def test_state_follows_a_crashing_process(
    runtime: SimContainerRuntime, registry: SimRegistry, port: int, eventually: Eventually
) -> None:
    crashing = registry.add("registry.lan:5000/vllm:bad", env={"STANDIN_CRASH_AFTER_S": "0.2"})
    await runtime.execute(_run_argv(crashing.pinned, "l1-r0", port))

    async def exited() -> bool:
        _, out, _ = await runtime.execute(["docker", "inspect", "-f", "{{.State.Status}}", "l1-r0"])
        return out == "exited\n"

    await eventually(exited, 5)
    _, out, _ = await runtime.execute(["docker", "ps", "-a", "--format", "{{.Status}}"])
    assert out.startswith("Exited (1)")


async def test_worker_rank_serves_no_port(
    runtime: SimContainerRuntime, image: SimImage, port: int, eventually: Eventually
) -> None:
    await runtime.execute(_run_argv(image.pinned, "l1-r1", port, rank="1"))

    async def logged() -> bool:
        return "worker rank" in (await runtime.execute(["docker", "logs", "l1-r1"]))[1]

    await eventually(logged, 5)
    assert runtime.listening_ports() == []
    assert runtime.serving_port("l1-r1") is None


async def test_probe_reports_containers_memory_models_and_lease(
    runtime: SimContainerRuntime, image: SimImage, port: int, eventually: Eventually, clock: Clock
) -> None:
    runtime.add_model_path("/srv/models/q", 16 * GIB)
    probe = fc.probe_argv(["/srv/models/q", "/srv/models/absent"], "/var/lib/lanes/lease.json", "/srv/models")
    idle = parse_probe("spark9", (await runtime.execute(probe))[1])
    assert idle.containers == ()
    assert idle.memory is not None
    assert 118 * GIB < idle.memory.total_bytes < 120 * GIB

    await runtime.execute(_run_argv(image.pinned, "l1-r0", port))
    await runtime.execute(["docker", "run", "-d", "--name", "hand-made", image.pinned, "serve", "x", "--port", "1"])
    await runtime.execute(fc.lease_argv("acquire", "/var/lib/lanes/lease.json", "lanes@ctl", 60))

    async def listening() -> bool:
        return port in runtime.listening_ports()

    await eventually(listening, 5)
    host = parse_probe("spark9", (await runtime.execute(probe))[1])
    assert [(c.name, c.lane, c.rank, c.running) for c in host.containers] == [("l1-r0", "l1", 0, True)]
    assert [u.name for u in host.unmanaged] == ["hand-made"]
    assert port in host.listening
    assert host.memory is not None
    assert idle.memory.available_bytes - host.memory.available_bytes == 2 * 10 * GIB
    assert {p: (m.exists, m.bytes) for p, m in host.models.items()} == {
        "/srv/models/q": (True, 16 * GIB),
        "/srv/models/absent": (False, 0),
    }
    assert host.lease is not None
    assert (host.lease.owner, host.lease.expires) == ("lanes@ctl", clock.now + 60)
    assert host.probed_at == clock.now
    assert host.hostname == "spark9"

    runtime.docker_available = False
    bare = parse_probe("spark9", (await runtime.execute(probe))[1])
    assert (bare.containers, bare.unmanaged, bare.probe_errors) == ((), (), ("docker: not found",))
    assert await runtime.execute(["docker", "ps"]) == (127, "", "sh: docker: not found\n")


async def test_lease_semantics(runtime: SimContainerRuntime, clock: Clock) -> None:
    path = "/var/lib/lanes/lease.json"

    async def lease(action: str, owner: str, ttl: int = 60) -> tuple[int, bool, str | None]:
        status, out, _ = await runtime.execute(fc.lease_argv(action, path, owner, ttl))  # type: ignore[arg-type]
        outcome = parse_lease_output(out)
        return status, outcome.ok, outcome.lease.owner if outcome.lease else None

    assert await lease("acquire", "a") == (0, True, "a")
    first = runtime.facts.leases[path]["acquired"]
    clock.now += 30
    assert await lease("acquire", "a") == (0, True, "a")  # renew keeps the acquisition time
    assert runtime.facts.leases[path]["acquired"] == first
    assert await lease("acquire", "b") == (3, False, "a")
    assert await lease("release", "b") == (3, False, "a")
    clock.now += 61
    assert await lease("acquire", "b") == (0, True, "b")  # a's lease expired
    assert await lease("release", "b") == (0, True, None)
    assert path not in runtime.facts.leases


async def test_envfile_dropcaches_and_other_commands(
    runtime: SimContainerRuntime, image: SimImage, port: int, eventually: Eventually
) -> None:
    path = "/etc/lanes/env/l1.env"
    assert runtime.wants_stdin(fc.envfile_argv(path))
    assert not runtime.wants_stdin(["docker", "ps"])
    assert await runtime.execute(fc.envfile_argv(path), "# secrets\nHF_TOKEN=hf_secret\n") == (0, "", "")
    assert runtime.envfiles[path].mode == 0o600
    status, _, _ = await runtime.execute(_run_argv(image.pinned, "l1-r0", port, "--env-file", path))
    assert status == 0
    _, out, _ = await runtime.execute(["docker", "inspect", "-f", "{{json .Config.Env}}", "l1-r0"])
    assert json.loads(out)[-1] == "HF_TOKEN=hf_secret"

    before = runtime.facts.page_cache
    assert await runtime.execute(fc.dropcaches_argv()) == (0, "", "")
    assert runtime.facts.page_cache < before
    assert runtime.facts.drop_caches_count == 1

    assert await runtime.execute(["nvidia-smi"]) == (127, "", "sh: nvidia-smi: not found\n")
    tampered = fc.probe_argv([], "/l", "/")
    tampered[3] = "print(1)"
    status, _, err = await runtime.execute(tampered)
    assert status == 2
    assert "differs" in err
