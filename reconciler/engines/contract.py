"""How every rank's container runs on a Spark: the flags Spark users run engines with, with their sources.

Two modes, chosen per fleet (`container.mode` in fleet.yaml):

- **privileged**: `--privileged` with host network and IPC, as eugr's
  launch-cluster.sh runs every node (`docker run -d --privileged --gpus all
  --rm --ipc=host --network host`) and as sparkrun does by default
  (orchestration/executor.py `EXECUTOR_DEFAULTS`: privileged, ipc host,
  network host, shm 32gb). The RDMA devices and unlimited memlock come with
  the privilege.
- **rootless**: what sparkrun's rootless mode adds instead of the privilege
  (core/launcher.py: `--security-opt no-new-privileges`, `--ulimit
  memlock=-1:-1`, `--ulimit stack=67108864`, `--device /dev/infiniband`) and
  what sparkrun-recipes' launch-sgl-dsv41.sh adds on top (`--cap-add
  IPC_LOCK`, so verbs may pin memory). The RDMA devices are passed only to a
  multi-node lane on a host whose data-plane ports name a RoCE device: a
  host without one has no /dev/infiniband to pass (docker refuses a missing
  device), and the probe checks that the devices are there.

In both modes, from launch-sgl-dsv41.sh: a 32 GB shm, a memory cap below
the host's 128 GB (`--memory 112g --memory-swap 112g`, no swap beyond it)
and `--oom-score-adj 500`, so on memory pressure the kernel kills the
container before sshd or the host itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.spec import ContainerContract, Host

RDMA_DEVICES = "/dev/infiniband"
MEMLOCK_UNLIMITED = "memlock=-1:-1"
STACK_64_MIB = "stack=67108864"
"""64 MiB, as NVIDIA's PyTorch containers ask to be run (sparkrun's trtllm runtime, the recipes' launcher)."""


@dataclass(frozen=True)
class ContainerFlags:
    privileged: bool
    devices: tuple[str, ...]
    cap_add: tuple[str, ...]
    ulimits: tuple[str, ...]
    security_opt: tuple[str, ...]
    shm_size: str
    memory: str | None
    oom_score_adj: int


def container_flags(contract: ContainerContract, host: Host, *, multi_node: bool) -> ContainerFlags:
    if contract.mode == "privileged":
        return ContainerFlags(
            privileged=True,
            devices=(),
            cap_add=(),
            ulimits=(),
            security_opt=(),
            shm_size=contract.shm_size,
            memory=contract.memory_limit,
            oom_score_adj=contract.oom_score_adj,
        )
    has_rdma = any(port.hca is not None for port in host.data_plane)
    return ContainerFlags(
        privileged=False,
        devices=(RDMA_DEVICES,) if multi_node and has_rdma else (),
        cap_add=("IPC_LOCK",),
        ulimits=(MEMLOCK_UNLIMITED, STACK_64_MIB),
        security_opt=("no-new-privileges",),
        shm_size=contract.shm_size,
        memory=contract.memory_limit,
        oom_score_adj=contract.oom_score_adj,
    )
