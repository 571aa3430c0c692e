"""The simulated docker refuses the container flags a real one refuses, and finds only the devices the host has."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reconciler.sim.registry import SimImage, SimRegistry
from reconciler.sim.runtime import SimContainerRuntime

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[tuple[SimContainerRuntime, SimImage]]:
    registry = SimRegistry()
    image = registry.add("127.0.0.1:5077/lanes/standin:v1")
    rt = SimContainerRuntime("spark1", "127.0.0.1", registry, tmp_path / "spark1")
    yield rt, image
    await rt.shutdown()


async def run(rt: SimContainerRuntime, image: SimImage, *flags: str) -> tuple[int, str]:
    status, _, err = await rt.execute(["docker", "run", "-d", "--name", "rank0", "--gpus", "all", "--network", "host",
                                       *flags, image.pinned, "sleep"])  # fmt: skip
    return status, err


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--ulimit", "memlock=1:x"), 'invalid argument "memlock=1:x" for "--ulimit" flag'),
        (("--ulimit", "lockedmem=-1"), "invalid ulimit type: lockedmem"),
        (("--cap-add", "IPC_LOCKS"), 'unknown capability: "CAP_IPC_LOCKS"'),
        (("--oom-score-adj", "1001"), "range for oom score adj is [-1000, 1000]"),
        (("--memory", "112g", "--memory-swap", "64g"), "Minimum memoryswap limit should be larger than memory"),
        (("--memory-swap", "64g"), "You should always set the Memory limit when using Memoryswap limit"),
    ],
)
async def test_flags_docker_refuses(
    runtime: tuple[SimContainerRuntime, SimImage], flags: tuple[str, ...], says: str
) -> None:
    status, err = await run(*runtime, *flags)
    assert status == 125 and says in err, err


async def test_the_rdma_devices_are_found_only_on_a_host_that_has_them(
    runtime: tuple[SimContainerRuntime, SimImage],
) -> None:
    rt, image = runtime
    rt.facts.info.rdma = {}  # a host without RoCE devices: no /dev/infiniband either
    status, err = await run(rt, image, "--device", "/dev/infiniband")
    assert status == 125 and 'error gathering device information while adding custom device "/dev/infiniband"' in err
    rt.facts.info = type(rt.facts.info).gb10()
    rootless = ("--device", "/dev/infiniband", "--ulimit", "memlock=-1:-1", "--cap-add", "IPC_LOCK")
    status, err = await run(rt, image, *rootless, "--memory", "112g", "--memory-swap", "112g", "--oom-score-adj", "500")
    assert status == 0, err
    config = rt.containers["rank0"].host_config
    assert config["Devices"][0]["PathOnHost"] == "/dev/infiniband"
    assert (config["CapAdd"], config["OomScoreAdj"], config["Memory"]) == (["CAP_IPC_LOCK"], 500, 112 << 30)
