"""The simulator's docker answers the commands lanes sends in the shapes real docker does.

Tests that pass against the simulated Sparks must mean something on a real
one, so the simulated docker is held to the recorded outputs in `cases/`:
every field its `inspect` / `image inspect` prints exists in docker's with
the same JSON type, and the errors of a missing container are docker's,
byte for byte. The parsers of `facts/docker.py` read both the same way.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from reconciler.facts import docker
from reconciler.facts.commands import envfile_argv
from reconciler.sim import dockercli as cli
from reconciler.sim.containers import SimContainer
from reconciler.sim.dockercli import CliError
from reconciler.sim.registry import SimImage, SimRegistry
from reconciler.sim.runtime import SimContainerRuntime
from reconciler.sim.sharedclient import SharedStandinError

pytestmark = pytest.mark.timeout(60)

CASES = Path(__file__).parent / "cases"
ADDRESS = "127.77.9.2"
NAME = "lanes-golden-r0"
GONE = "lanes-golden-r9"  # the name the recorded "missing" outputs use
LABELS = {
    "lanes.commit": "5f0c6b1e2d3a4f5061728394a5b6c7d8e9f00112",
    "lanes.engine": "vllm",
    "lanes.lane": "golden",
    "lanes.managed": "true",
    "lanes.port": "8000",
    "lanes.rank": "0",
    "lanes.spec": "3f9a0c1d2e4b5a67",
}


def _case(name: str) -> dict[str, Any]:
    case: dict[str, Any] = json.loads((CASES / name).read_text())
    return case


def _answer(what: str) -> tuple[int, str, str]:
    """docker's recorded answer to one command, by the argv's verb and whether the container existed."""
    for answer in _case("cli/docker.json")["answers"]:
        if answer["what"] == what:
            return answer["exit_status"], answer["stdout"], answer["stderr"]
    raise AssertionError(f"no recorded answer: {what}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        port: int = s.getsockname()[1]
        return port


def assert_docker_shape(sim: object, real: object, path: str = "") -> None:
    """Every field the simulator prints is one docker prints, with the same JSON type.

    Go prints a nil list or map as null, so null stands for an empty list or object either way.
    """
    if sim is None or real is None:
        assert sim is real or isinstance(sim if real is None else real, list | dict), f"{path}: {sim!r} vs {real!r}"
    elif isinstance(sim, dict):
        assert isinstance(real, dict), f"{path}: an object in the sim, {type(real).__name__} in docker"
        for key, value in sim.items():
            assert key in real, f"{path}.{key}: printed by the sim, not by docker"
            assert_docker_shape(value, real[key], f"{path}.{key}")
    elif isinstance(sim, list):
        assert isinstance(real, list), f"{path}: a list in the sim, {type(real).__name__} in docker"
        if sim and real:
            for item in sim:
                assert_docker_shape(item, real[0], f"{path}[]")
    else:
        assert type(sim) is type(real), f"{path}: {type(sim).__name__} in the sim, {type(real).__name__} in docker"


@pytest.fixture
def image() -> tuple[SimRegistry, SimImage]:
    registry = SimRegistry()
    return registry, registry.add("127.0.0.1:5077/lanes/standin:v1")


@pytest.fixture
async def runtime(image: tuple[SimRegistry, SimImage], tmp_path: Path) -> AsyncIterator[SimContainerRuntime]:
    rt = SimContainerRuntime("spark1", ADDRESS, image[0], tmp_path / "spark1")
    (tmp_path / "hf").mkdir()
    yield rt
    await rt.shutdown()


def _run_argv(image: SimImage, hf: Path, env_file: str) -> list[str]:
    """The flags lanes sends (facts.docker.run_argv's shape), with a stand-in engine command."""
    argv = ["docker", "run", "-d", "--name", NAME, "--restart", "no", "--gpus", "all", "--network", "host"]
    argv += ["--ipc", "host", "--shm-size", "16g"]
    for key, value in LABELS.items():
        argv += ["--label", f"{key}={value}"]
    argv += ["-e", "HF_HOME=/root/.cache/huggingface", "--env-file", env_file]
    argv += ["-v", f"{hf}:/root/.cache/huggingface", "-v", f"{hf}:/models/m:ro", image.pinned]
    return [*argv, "vllm", "serve", "/models/m", "--port", str(_free_port()), "--served-model-name", "m"]


async def test_pull_and_image_inspect(runtime: SimContainerRuntime, image: tuple[SimRegistry, SimImage]) -> None:
    pinned = image[1].pinned
    status, out, err = await runtime.execute(docker.pull_argv(pinned))
    recorded = _answer("the image by digest, first time on this host")[1]
    # Same lines as docker's, less the per-layer progress (a simulated image has no layers).
    expected = [line for line in recorded.splitlines() if not line.startswith("0aed9bd80701: ")]
    real_ref = _case("docker_image_inspect_pinned.json")["argv"][-1]
    assert (status, err) == (0, "")
    assert out.replace(pinned, real_ref).replace(image[1].digest, real_ref.rsplit("@")[-1]).splitlines() == expected

    status, out, err = await runtime.execute(docker.image_inspect_argv(pinned))
    assert (status, err) == (0, "")
    assert_docker_shape(json.loads(out), json.loads(_case("docker_image_inspect_pinned.json")["stdout"]))
    assert docker.has_digest(docker.parse_image_inspect(out), image[1].digest)

    missing = "127.0.0.1:5077/lanes/nothere@sha256:" + "ab" * 32
    status, out, _ = await runtime.execute(docker.image_inspect_argv(missing))
    recorded_case = _case("docker_image_inspect_missing.json")
    # The words on stderr differ between docker versions (and `tests/sim` pins the sim's); the rest must not.
    assert (status, out) == (recorded_case["exit_status"], recorded_case["stdout"])

    status, _, err = await runtime.execute(docker.pull_argv(pinned.rsplit("@")[0] + "@sha256:" + "ab" * 32))
    real = _answer("a digest the registry does not have")
    assert (status, err.replace("lanes/standin@", "X@")) == (real[0], real[2].replace("lanes/standin@", "X@"))


async def test_inspect_of_a_running_then_stopped_container(
    runtime: SimContainerRuntime, image: tuple[SimRegistry, SimImage], tmp_path: Path
) -> None:
    registry_image = image[1]
    env_file = "/state/env/lanes-golden-r0.env"
    assert (await runtime.execute(envfile_argv(env_file), "HF_TOKEN=not-a-secret\n"))[0] == 0
    status, out, err = await runtime.execute(_run_argv(registry_image, tmp_path / "hf", env_file))
    assert status == 0, err

    status, out, err = await runtime.execute(docker.inspect_argv(NAME))
    assert (status, err) == (0, "")
    assert_docker_shape(json.loads(out), json.loads(_case("docker_inspect_running.json")["stdout"]))
    assert_docker_shape(json.loads(out), json.loads(_case("docker_inspect_created.json")["stdout"]))
    [found] = docker.parse_inspect(out)
    assert (found.name, found.state, found.labels, found.image) == (NAME, "running", LABELS, registry_image.pinned)
    config = json.loads(out)[0]["Config"]
    # docker puts the env file's variables before the -e ones (the image's come first of all).
    assert config["Env"][-2:] == ["HF_TOKEN=not-a-secret", "HF_HOME=/root/.cache/huggingface"]

    status, out, err = await runtime.execute(docker.stop_argv(NAME, 5))
    assert (status, out, err) == (0, NAME + "\n", "")
    status, out, _ = await runtime.execute(docker.inspect_argv(NAME))
    assert_docker_shape(json.loads(out), json.loads(_case("docker_inspect_stopped.json")["stdout"]))
    assert docker.container_state(out) == "exited"

    status, out, err = await runtime.execute(docker.rm_argv(NAME))
    assert (status, out, err) == (0, NAME + "\n", "")


async def test_a_container_that_cannot_start_stays_created(
    runtime: SimContainerRuntime, image: tuple[SimRegistry, SimImage], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `docker run --gpus all` on a host without the NVIDIA runtime: the id is printed, the start fails."""

    async def cannot_start(
        self: SimContainer, address: str, work_dir: Path, peers: Mapping[str, str] | None = None
    ) -> None:
        raise SharedStandinError("the stand-in process is gone")

    monkeypatch.setattr(SimContainer, "launch", cannot_start)
    env_file = "/state/env/lanes-golden-r0.env"
    await runtime.execute(envfile_argv(env_file), "HF_TOKEN=not-a-secret\n")
    status, out, err = await runtime.execute(_run_argv(image[1], tmp_path / "hf", env_file))
    real = next(a for a in _case("cli/docker.json")["answers"] if a["argv"][1] == "run")
    assert (status, len(out.strip()), out.count("\n")) == (real["exit_status"], len(real["stdout"].strip()), 1)
    assert err.splitlines()[-1].startswith("docker: Error response from daemon: ")

    status, out, _ = await runtime.execute(docker.inspect_argv(NAME))
    recorded = json.loads(_case("docker_inspect_created.json")["stdout"])
    assert_docker_shape(json.loads(out), recorded)
    state = json.loads(out)[0]["State"]
    assert (state["Status"], state["ExitCode"], bool(state["Error"])) == ("created", 128, True)
    assert (recorded[0]["State"]["ExitCode"], bool(recorded[0]["State"]["Error"])) == (128, True)


@pytest.mark.parametrize(
    ("argv", "recorded"),
    [
        (docker.inspect_argv(GONE), "inspect"),
        (docker.stop_argv(GONE, 2), "no such container"),
        (docker.rm_argv(GONE), "no such container, with -f"),
        (docker.logs_argv(GONE, 5), "no such container"),
    ],
    ids=["inspect", "stop", "rm", "logs"],
)
async def test_a_missing_container_is_answered_as_docker_does(
    runtime: SimContainerRuntime, argv: list[str], recorded: str
) -> None:
    if recorded == "inspect":
        case = _case("docker_inspect_missing.json")
        expected = (case["exit_status"], case["stdout"], case["stderr"])
    else:
        answers = [a for a in _case("cli/docker.json")["answers"] if a["what"] == recorded and a["argv"][1] == argv[1]]
        expected = (answers[0]["exit_status"], answers[0]["stdout"], answers[0]["stderr"])
    assert await runtime.execute(argv) == expected


def test_sizes_ulimits_and_gpus_are_recorded_as_docker_types_them() -> None:
    assert [cli.ram_in_bytes(v, "--shm-size") for v in ("16g", "64m", "1.5k", "512", "2GiB")] == [
        17179869184,
        67108864,
        1536,
        512,
        2147483648,
    ]
    with pytest.raises(CliError) as info:
        cli.ram_in_bytes("lots", "--shm-size")
    assert (info.value.status, info.value.message) == (
        125,
        'invalid argument "lots" for "--shm-size" flag: invalid size: \'lots\'',
    )
    assert cli.parse_ulimits([]) is None
    assert cli.parse_ulimits(["nofile=1024:2048", "memlock=-1"]) == [
        {"Name": "nofile", "Hard": 2048, "Soft": 1024},
        {"Name": "memlock", "Hard": -1, "Soft": -1},
    ]
    recorded = json.loads(_case("docker_inspect_created.json")["stdout"])[0]["HostConfig"]
    assert cli.device_requests("all") == recorded["DeviceRequests"]
    assert cli.device_requests(None) is None
    assert cli.ram_in_bytes("16g", "--shm-size") == recorded["ShmSize"]
