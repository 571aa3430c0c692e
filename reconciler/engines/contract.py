"""How every rank's container runs on a Spark: the flags Spark users run engines with, with their sources.

Two modes, chosen per fleet (`container.mode` in fleet.yaml):

- **privileged**: `--privileged` with host network and IPC, as eugr's
  launch-cluster.sh runs every node (`docker run -d --privileged --gpus all
  --rm --ipc=host --network host`) and as sparkrun does by default
  (orchestration/executor.py `EXECUTOR_DEFAULTS`: privileged, ipc host,
  network host). The RDMA devices and every capability, IPC_LOCK among
  them, come with the privilege.
- **rootless**: what sparkrun's rootless mode adds instead of the privilege
  (core/launcher.py: `--security-opt no-new-privileges`, `--ulimit
  memlock=-1:-1`, `--ulimit stack=67108864`, `--device /dev/infiniband`) and
  what sparkrun-recipes' launch-sgl-dsv41.sh adds on top (`--cap-add
  IPC_LOCK`, so verbs may pin memory). The RDMA devices are passed only to a
  multi-node lane on a host whose data-plane ports name a RoCE device: a
  host without one has no /dev/infiniband to pass (docker refuses a missing
  device), and the probe checks that the devices are there.

In both modes the contract's ulimits (`--ulimit memlock=-1:-1 --ulimit
stack=67108864`), as the production lane's own launcher passes them beside
its devices and IPC_LOCK (aidendle94/sparkrun-recipes,
recipes/deepseek-v4.1-flash/sglang/launch/launch-sgl-dsv41.sh @ 08d7b30):
`--privileged` does not lift them. Docker's reference
(docs.docker.com/reference/cli/docker/container/run/, "--privileged" and
"--ulimit") gives a privileged container every capability and every device
and says nothing of resource limits; a container's ulimits are the ones
`--ulimit` sets, else the daemon's defaults (`dockerd --default-ulimit`),
else what dockerd itself runs with. The capability lets a root process lock
memory past RLIMIT_MEMLOCK (mlock(2)), but the limit stays as it was for
whatever reads it, and nothing raises RLIMIT_STACK; every launcher above
that sets ulimits passes both (sparkrun's runtimes/trtllm.py too).
Adding them to privileged containers changes their spec hash: an upgrade of
lanes restarts every running rank once (tests/engines/test_spec_hash_pin.py).

In both modes, from launch-sgl-dsv41.sh: a memory cap below the host's
128 GB (`--memory 112g --memory-swap 112g`, no swap beyond it) and
`--oom-score-adj 500`, so on memory pressure the kernel kills the container
before sshd or the host itself.

No `--shm-size`, although those launchers pass 32 GB: with `--ipc host` the
container uses the host's /dev/shm, so docker ignores the size (only a
private or shareable IPC namespace gets a /dev/shm of its own) and podman
refuses the pair ("cannot set shmsize when running in the host IPC
Namespace", found on the rig). The host's /dev/shm is half its memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.spec import ContainerContract, Host

RDMA_DEVICES = "/dev/infiniband"


@dataclass(frozen=True)
class ContainerFlags:
    privileged: bool
    devices: tuple[str, ...]
    cap_add: tuple[str, ...]
    ulimits: tuple[str, ...]
    security_opt: tuple[str, ...]
    memory: str | None
    oom_score_adj: int


def container_flags(contract: ContainerContract, host: Host, *, multi_node: bool) -> ContainerFlags:
    if contract.mode == "privileged":
        return ContainerFlags(
            privileged=True,
            devices=(),
            cap_add=(),
            ulimits=contract.ulimits,
            security_opt=(),
            memory=contract.memory_limit,
            oom_score_adj=contract.oom_score_adj,
        )
    has_rdma = any(port.hca is not None for port in host.data_plane)
    return ContainerFlags(
        privileged=False,
        devices=(RDMA_DEVICES,) if multi_node and has_rdma else (),
        cap_add=("IPC_LOCK",),
        ulimits=contract.ulimits,
        security_opt=("no-new-privileges",),
        memory=contract.memory_limit,
        oom_score_adj=contract.oom_score_adj,
    )
