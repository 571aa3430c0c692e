"""What every engine renderer shares: the rank context, sealing a container spec, its hash.

A lane rank becomes one container. The planner decides drift by comparing a
hash of what would run with the `lanes.spec` label of what runs, so the hash
covers exactly what `docker run` receives (image, argv, env, mounts, flags)
and nothing else: the state commit rides along in a label but stays out of
the hash, so a commit that does not change what runs restarts nothing.

Every lane field stays one argv item from here to the host (the argv is
built by `reconciler.facts.docker.run_argv`): nothing is ever pasted into a
shell string, and the remote side quotes the list with `shlex.join`.
Secrets appear only as environment variable names; their values reach the
host in a 0600 env file that `docker run --env-file` reads.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from reconciler.engines.contract import container_flags
from reconciler.engines.fabric import RankNet
from reconciler.engines.hostfacts import host_env
from reconciler.engines.ports import LanePorts
from reconciler.errors import InputError
from reconciler.facts.container import ContainerSpec
from reconciler.facts.hostinfo import HostInfo
from reconciler.facts.labels import (
    LABEL_COMMIT,
    LABEL_ENGINE,
    LABEL_LANE,
    LABEL_MANAGED,
    LABEL_PORT,
    LABEL_RANK,
    LABEL_SPEC,
    MANAGED_VALUE,
)
from reconciler.spec import FleetDefaults, Host, Lane, ModelSpec, Mount

UNHASHED_LABELS = frozenset({LABEL_SPEC, LABEL_COMMIT})
"""Labels that describe a container's provenance, not what it runs."""

HF_CACHE_TARGET = "/root/.cache/huggingface"
"""Where every engine image looks for the Hugging Face cache (HF_HOME points here too): the images run as
root, and Spark launchers mount the host's cache there (eugr/spark-vllm-docker launch-cluster.sh @ 74c02c3,
DOCKER_ARGS `-v $HOME/.cache/huggingface:/root/.cache/huggingface`; sparkrun-recipes' launch-sgl-dsv41.sh
mounts its cache folder as /root/.cache)."""

BIND_ALL = "0.0.0.0"
SPEC_SCHEMA = 2
"""Bumped when the hashed shape changes, so old and new hashes never collide by accident."""

HASH_CHARS = 16


def container_name(lane: str, rank: int) -> str:
    return f"lanes-{lane}-r{rank}"


@dataclass(frozen=True)
class RankContext:
    """Everything a renderer may look at for one rank of one lane."""

    lane: Lane
    model: ModelSpec
    fleet: FleetDefaults
    rank: int
    host: Host
    """This rank's host, `lane.hosts[rank]`."""
    commit: str
    """State commit sha: goes into a label, never into the spec hash."""
    ports: LanePorts
    network: tuple[RankNet, ...] = ()
    """Every rank's network in rank order (`engines.fabric`); empty for a single-rank lane."""
    info: HostInfo | None = None
    """What this cycle's probe read of the rank's host (its RDMA facts give `host_env`'s roce_gid_index); None
    when it was not probed (`lanes check`, a host that did not answer)."""

    @property
    def ranks(self) -> int:
        return self.lane.ranks

    @property
    def multi_node(self) -> bool:
        return self.lane.ranks > 1

    @property
    def is_head(self) -> bool:
        return self.rank == 0

    @property
    def net(self) -> RankNet:
        """This rank's network; only multi-node lanes have one."""
        if not self.network:
            raise ValueError(f"lane '{self.lane.name}' has one rank and no data-plane network")
        return self.network[self.rank]

    @property
    def address(self) -> str:
        """What this rank announces as its own address: on the data plane, never the SSH address."""
        return self.net.own_address

    @property
    def head_address(self) -> str:
        """Where this rank finds rank 0, the rendezvous point of every multi-node launcher."""
        return self.net.head_address

    @property
    def peer_addresses(self) -> tuple[str, ...]:
        return tuple(n.own_address for n in self.network)


def compute_spec_hash(spec: ContainerSpec) -> str:
    """sha256 over the canonical JSON of what runs.

    Left out: the `lanes.spec` and `lanes.commit` labels (provenance), the
    hash itself, and `serves_http` (a consequence of the rank, which the
    name and labels already carry).
    """
    body = {
        "schema": SPEC_SCHEMA,
        "name": spec.name,
        "image": spec.image,
        "command": list(spec.command),
        "entrypoint": spec.entrypoint,
        "env": [list(kv) for kv in spec.env],
        "secret_env": list(spec.secret_env),
        "env_file": spec.env_file,
        "labels": [list(kv) for kv in spec.labels if kv[0] not in UNHASHED_LABELS],
        "mounts": [[m.source, m.target, m.read_only] for m in spec.mounts],
        "network": spec.network,
        "ipc": spec.ipc,
        "gpus": spec.gpus,
        "shm_size": spec.shm_size,
        "privileged": spec.privileged,
        "devices": list(spec.devices),
        "cap_add": list(spec.cap_add),
        "ulimits": list(spec.ulimits),
        "security_opt": list(spec.security_opt),
        "memory": spec.memory,
        "oom_score_adj": spec.oom_score_adj,
    }
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:HASH_CHARS]


def rank_env(ctx: RankContext, engine_env: Mapping[str, str]) -> dict[str, str]:
    """HF cache and the data plane as Spark users set them, then the engine's, then the lane's.

    The lane's own `env` wins: it is how a team sets what the renderer cannot
    know (NCCL_DEBUG, NCCL buffer sizes, an engine switch).
    """
    env = {"HF_HOME": HF_CACHE_TARGET}
    if ctx.multi_node:
        env.update(fabric_env(ctx.net))
    env.update(engine_env)
    env.update(ctx.lane.env)
    env.update(host_env(ctx))  # apart from `env` by validation: no variable has both
    return env


def fabric_env(net: RankNet) -> dict[str, str]:
    """NCCL, GLOO, TensorPipe and UCX on the rank's data plane (or, on a ring, its control network).

    Sources: NVIDIA's vLLM playbook (nvidia/vllm/README.md: NCCL_SOCKET_IFNAME,
    GLOO_SOCKET_IFNAME, TP_SOCKET_IFNAME, UCX_NET_DEVICES on the QSFP
    interface); sparkrun's orchestration/infiniband.py `generate_nccl_env`
    (NCCL_NET=IB, NCCL_IB_DISABLE=0, NCCL_CROSS_NIC=1,
    NCCL_IGNORE_CPU_AFFINITY=1, NCCL_IB_HCA; on a ring NCCL_NET_PLUGIN=none,
    NCCL_IB_SUBNET_AWARE_ROUTING=1, NCCL_IB_MERGE_NICS=0, as NVIDIA's
    spark_cluster_setup.py runs its ring test); sparkrun-recipes'
    launch-sgl-dsv41.sh (NCCL_IB_ROCE_VERSION_NUM=2, NCCL_IB_ADDR_FAMILY=AF_INET,
    NCCL_IB_ADDR_RANGE=the fabric subnet).

    No NCCL_IB_GID_INDEX: the RoCE v2 GID of the port's IPv4 address differs
    between Sparks of one fleet (3 on some, 4 on others, as that launcher
    notes), and NCCL since 2.21 picks it itself on each node when the index is
    unset (NVIDIA/nccl src/transport/net_ib/connect.cc: IB_GID_INDEX defaults
    to -1, selected by IB_ADDR_FAMILY, IB_ADDR_RANGE and IB_ROCE_VERSION_NUM).
    The probe checks that such a GID exists on every rank host.
    """
    ifnames = ",".join(net.socket_ifnames)
    env = {
        "NCCL_SOCKET_IFNAME": ifnames,
        "GLOO_SOCKET_IFNAME": ifnames,
        "TP_SOCKET_IFNAME": ifnames,
        "UCX_NET_DEVICES": ifnames,
        "NCCL_IGNORE_CPU_AFFINITY": "1",
    }
    if not net.hcas:
        # No RoCE device on these ports: NCCL's socket transport, said out loud rather than found by a timeout.
        env["NCCL_IB_DISABLE"] = "1"
        return env
    env.update(
        {
            "NCCL_IB_DISABLE": "0",
            "NCCL_NET": "IB",
            "NCCL_IB_HCA": ",".join(net.hcas),
            "NCCL_CROSS_NIC": "1",
            "NCCL_IB_ROCE_VERSION_NUM": "2",
            "NCCL_IB_ADDR_FAMILY": "AF_INET",
        }
    )
    if net.ib_subnet is not None:
        env["NCCL_IB_ADDR_RANGE"] = net.ib_subnet
    if net.ring:
        env.update({"NCCL_NET_PLUGIN": "none", "NCCL_IB_SUBNET_AWARE_ROUTING": "1", "NCCL_IB_MERGE_NICS": "0"})
    return env


def rank_mounts(ctx: RankContext) -> tuple[Mount, ...]:
    """HF cache read-write, the checkpoint read-only at its own path, then the lane's mounts."""
    mounts = (*_standard_mounts(ctx.fleet.hf_cache, ctx.model.path), *ctx.lane.mounts)
    seen: set[str] = set()
    for index, mount in enumerate(mounts):
        where = _mount_field(index)
        for part in (mount.source, mount.target):
            if ":" in part:
                # `docker run -v` splits on ':'; such a path cannot be expressed without misparsing.
                raise InputError(f"lane '{ctx.lane.name}': mount path {part!r} contains ':'", field=where)
        if mount.target in seen:
            raise InputError(
                f"lane '{ctx.lane.name}': two mounts target {mount.target!r} (the HF cache and the model "
                "path are mounted already)",
                field=where,
            )
        seen.add(mount.target)
    return mounts


@functools.lru_cache(maxsize=1024)
def _standard_mounts(hf_cache: str, model_path: str) -> tuple[Mount, Mount]:
    """The HF cache and the checkpoint, validated once per pair (mounts are frozen: every rank shares them)."""
    return (
        Mount(source=hf_cache, target=HF_CACHE_TARGET),
        Mount(source=model_path, target=model_path, read_only=True),
    )


def _mount_field(index: int) -> str:
    if index == 0:
        return "hf_cache"
    if index == 1:
        return "model.path"
    return f"mounts[{index - 2}]"


_PAIRS: dict[tuple[str, str], tuple[str, str]] = {}
_PAIRS_MAX = 1 << 16
"""Past this many distinct pairs the table starts again: a long-lived daemon renders each commit's new values,
and what the table forgets stays shared by the specs that hold it."""


def shared_pairs(items: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """A rank's env or labels, sorted, each (key, value) pair one object for every rank that has it equal:
    1,000 ranks repeat most of theirs, and a tuple each was about 1 MB of the daemon's memory (issue 27)."""
    if len(_PAIRS) > _PAIRS_MAX:
        _PAIRS.clear()
    return tuple(_PAIRS.setdefault(pair, pair) for pair in sorted(items))


def seal(
    ctx: RankContext,
    *,
    image: str,
    entrypoint: str | None,
    command: Sequence[str],
    engine_env: Mapping[str, str],
) -> ContainerSpec:
    """Assemble a rank's spec from what the engine decided: env, labels, mounts, env file, hash."""
    lane = ctx.lane
    name = container_name(lane.name, ctx.rank)
    env = rank_env(ctx, engine_env)
    secret_env = tuple(sorted({secret.env for secret in lane.secrets}))
    for var in secret_env:
        if var in env:
            raise InputError(
                f"lane '{lane.name}': {var} is both a secret and a plain environment variable; "
                "a secret must come only from the env file",
                field="secrets",
            )
    env_file = f"{ctx.fleet.state_dir_on_host}/env/{name}.env" if secret_env else None
    if image.startswith("-"):
        raise InputError(f"lane '{lane.name}': image {image!r} would be read as a docker option", field="image")
    flags = container_flags(ctx.fleet.container, ctx.host, multi_node=ctx.multi_node)
    labels = {
        LABEL_MANAGED: MANAGED_VALUE,
        LABEL_LANE: lane.name,
        LABEL_RANK: str(ctx.rank),
        LABEL_PORT: str(lane.port),
        LABEL_ENGINE: lane.engine,
    }
    draft = ContainerSpec(
        name=name,
        image=image,
        command=tuple(command),
        entrypoint=entrypoint,
        env=shared_pairs(env.items()),
        secret_env=secret_env,
        env_file=env_file,
        labels=shared_pairs(labels.items()),
        mounts=rank_mounts(ctx),
        privileged=flags.privileged,
        devices=flags.devices,
        cap_add=flags.cap_add,
        ulimits=flags.ulimits,
        security_opt=flags.security_opt,
        memory=flags.memory,
        oom_score_adj=flags.oom_score_adj,
        spec_hash="",
        serves_http=ctx.is_head,
    )
    _refuse_nul(lane.name, _strings_of(draft))
    digest = compute_spec_hash(draft)
    labels[LABEL_SPEC] = digest
    labels[LABEL_COMMIT] = ctx.commit
    _refuse_nul(lane.name, [ctx.commit])
    return replace(draft, labels=shared_pairs(labels.items()), spec_hash=digest)


def _strings_of(spec: ContainerSpec) -> list[str]:
    out = [spec.name, spec.image, *spec.command, *spec.secret_env, spec.entrypoint or "", spec.env_file or ""]
    for key, value in (*spec.env, *spec.labels):
        out.extend((key, value))
    for mount in spec.mounts:
        out.extend((mount.source, mount.target))
    return out


def _refuse_nul(lane: str, values: Iterable[str]) -> None:
    for value in values:
        if "\x00" in value:
            raise InputError(f"lane '{lane}': {value!r} contains a NUL byte, which no command line can carry")


def all_at_once(lane: Lane) -> list[tuple[int, ...]]:
    """Launchers whose ranks rendezvous among themselves start every rank together."""
    return [tuple(range(lane.ranks))]
