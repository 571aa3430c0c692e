"""Every port a lane listens on, derived from its API port so two lanes on one host never collide.

Engines and Ray default to fixed ports (torch.distributed 29500, Ray's GCS
6379, its client server 10001, its dashboard agent 52365), so two multi-node
lanes whose heads share a host would fight over them. Each lane instead gets
a block at a fixed offset from its API `port`:

- `dist` = port + 20000: torch.distributed's store (vLLM `--master-port`,
  SGLang `--dist-init-addr HEAD:PORT`). SGLang with `--enable-dp-attention`
  also binds the six ports after it (sglang/srt/server_args.py,
  `PortArgs.init_new`: `port_base = dist_init_port + 1`, then detokenizer,
  rpc, metrics, scheduler input and load collector at +1..+5 of that).
- `ray` = port + 21000 and the seven after it: the GCS (`ray start --port`)
  and the ports Ray otherwise picks itself or fixes per host: node manager,
  object manager, client server (default 10001), dashboard agent HTTP
  (default 52365) and gRPC, metrics export, runtime-env agent (flags of
  `ray start`, docs.ray.io/en/latest/cluster/cli.html).
- Ray's workers: the 100 ports from port + 21100 (Ray's default range is
  10002-19999, shared by every Ray on the host).

The offsets keep clear of Ray's default worker range and of Linux's
ephemeral ports (32768-60999) for API ports up to 11767; a higher API port
still works, its block is only checked for clashes like any other.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.errors import InputError
from reconciler.spec import Lane

DIST_OFFSET = 20000
RAY_OFFSET = 21000
RAY_PORTS = 8
RAY_WORKER_OFFSET = 21100
RAY_WORKERS = 100
SGLANG_DP_ATTENTION_PORTS = 6
MAX_PORT = 65535


@dataclass(frozen=True)
class RayPorts:
    gcs: int
    node_manager: int
    object_manager: int
    client_server: int
    dashboard_agent_http: int
    dashboard_agent_grpc: int
    metrics_export: int
    runtime_env_agent: int
    min_worker: int
    max_worker: int

    def start_flags(self, *, head: bool) -> list[str]:
        """`ray start` flags pinning every port Ray would otherwise pick (the GCS port only on the head)."""
        flags = [f"--port={self.gcs}"] if head else []
        flags += [
            f"--node-manager-port={self.node_manager}",
            f"--object-manager-port={self.object_manager}",
            f"--dashboard-agent-listen-port={self.dashboard_agent_http}",
            f"--dashboard-agent-grpc-port={self.dashboard_agent_grpc}",
            f"--metrics-export-port={self.metrics_export}",
            f"--runtime-env-agent-port={self.runtime_env_agent}",
            f"--min-worker-port={self.min_worker}",
            f"--max-worker-port={self.max_worker}",
        ]
        if head:
            flags.append(f"--ray-client-server-port={self.client_server}")
        return flags


@dataclass(frozen=True)
class LanePorts:
    api: int
    dist: int
    ray: RayPorts

    @classmethod
    def of(cls, lane: Lane) -> LanePorts:
        port = lane.port
        last = port + RAY_WORKER_OFFSET + RAY_WORKERS - 1
        if lane.ranks > 1 and last > MAX_PORT:
            raise InputError(
                f"lane '{lane.name}': a multi-node lane's ports run from {port} to {last} (its torch.distributed "
                f"and Ray ports sit at fixed offsets above it), past {MAX_PORT}; choose a port up to "
                f"{MAX_PORT - RAY_WORKER_OFFSET - RAY_WORKERS + 1}",
                field="port",
            )
        base = port + RAY_OFFSET
        return cls(
            api=port,
            dist=port + DIST_OFFSET,
            ray=RayPorts(
                gcs=base,
                node_manager=base + 1,
                object_manager=base + 2,
                client_server=base + 3,
                dashboard_agent_http=base + 4,
                dashboard_agent_grpc=base + 5,
                metrics_export=base + 6,
                runtime_env_agent=base + 7,
                min_worker=port + RAY_WORKER_OFFSET,
                max_worker=port + RAY_WORKER_OFFSET + RAY_WORKERS - 1,
            ),
        )


def listening(lane: Lane, rank: int) -> dict[str, tuple[int, int]]:
    """What rank `rank` of the lane listens on, as name -> (first, last) port, for clash checks and display."""
    ports = LanePorts.of(lane)
    out = {"api": (ports.api, ports.api)}
    if lane.ranks < 2:
        return out
    ray = lane.engine == "vllm" and lane.launcher == "ray"
    if rank == 0 and not ray:
        last = ports.dist
        if lane.engine == "sglang" and "--enable-dp-attention" in lane.args:
            last += SGLANG_DP_ATTENTION_PORTS
        out["dist"] = (ports.dist, last)
    if ray:
        r = ports.ray
        first = r.gcs if rank == 0 else r.node_manager
        out["ray"] = (first, r.runtime_env_agent)
        out["ray-workers"] = (r.min_worker, r.max_worker)
    return out
