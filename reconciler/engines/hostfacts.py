"""Values that differ per rank: a lane's `host_env`, each variable taken from a fact of its rank's host.

One env for every rank cannot say what differs between Sparks of one fleet. The production lane's own
launcher (aidendle94/sparkrun-recipes, recipes/deepseek-v4.1-flash/sglang/launch/launch-sgl-dsv41.sh @ 08d7b30,
`run_cmd`) passes each rank:

- `B12X_ROCE_GID_INDEX` and `NCCL_IB_GID_INDEX`: the index of the RoCE v2 GID that carries the rank's fabric
  IPv4 address on its first RoCE device, probed on the node (`gid_snippet`: "It differs between nodes (3 on
  some, 4 on others in the same fleet) and a wrong index fails every RDMA connect"): `roce_gid_index`, read
  here from the probe's RDMA facts (`facts.hostinfo.RdmaDevice.roce_v2_ipv4_gids`);
- `B12X_ROCE_HCA` (its `ROCE_HCA`, by default `RDMA_HCAS`, the devices it gives NCCL_IB_HCA): `rdma_hcas`,
  the RoCE devices of the rank's data-plane ports as `engines.fabric` picks them;
- `NCCL_IB_SUBNET_PREFIX_LEN` (`${FABRIC_SUBNET#*/}`): `fabric_prefix_len`, the prefix length of the subnet
  of the rank's fabric address;
- `HOST_IP` (`${NODES[$r]}`, the rank's fabric address): `fabric_address`.

The first three come from the host file (`data_plane`), so `lanes check` renders them; `roce_gid_index` only
the probe knows. Where it was not read (no probe: `lanes check`; a host that did not answer) the value is a
placeholder (`unresolved`) that names the fact and the host, and the planner never starts a spec that holds
one: it blocks the lane with the host and the fact named (`placeholders`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from reconciler.errors import InputError
from reconciler.spec import DataPort
from reconciler.spec.lane import HostFact

if TYPE_CHECKING:  # engines.base renders host_env through this module
    from reconciler.engines.base import RankContext
    from reconciler.facts.hostinfo import HostInfo

PROBED: frozenset[HostFact] = frozenset({"roce_gid_index"})
"""Facts only the probe reads (the others are in the host file)."""
_MARK = "<lanes: "


def unresolved(fact: HostFact, host: str) -> str:
    """The value of a fact the probe has not read on `host`: never run (the planner blocks it)."""
    return f"{_MARK}{fact} of {host}, read by the probe>"


def placeholders(env: Iterable[tuple[str, str]]) -> list[str]:
    """The variables of a rendered env whose host fact was not read ("B12X_ROCE_GID_INDEX: roce_gid_index")."""
    return [f"{k}: {v.removeprefix(_MARK).split(' of ', 1)[0]}" for k, v in env if v.startswith(_MARK)]


def rendering_reads(info: HostInfo | None) -> object:
    """What rendering a rank reads of its host's probed facts (`RankContext.info`): its RDMA devices, for
    `roce_gid_index` below, and nothing else. A lane rendered before from equal values renders the same
    (`policy.reuse`), so a renderer that comes to read another fact of `info` must name it here too."""
    return info.rdma if info is not None else None


def host_env(ctx: RankContext) -> dict[str, str]:
    """This rank's `host_env`, resolved; raises InputError(field='host_env.VAR') for a fact the lane cannot have."""
    return {var: _value(ctx, var, fact) for var, fact in sorted(ctx.lane.host_env.items())}


def _refuse(ctx: RankContext, var: str, fact: HostFact, why: str) -> InputError:
    return InputError(f"lane '{ctx.lane.name}': host_env {var} ({fact}): {why}", field=f"host_env.{var}")


def _fabric_port(ctx: RankContext, var: str, fact: HostFact) -> DataPort:
    if not ctx.multi_node:
        raise _refuse(ctx, var, fact, "a single-rank lane has no data plane to take it from")
    net = ctx.net
    if net.ring:
        raise _refuse(ctx, var, fact, "the lane's ranks are cabled as a ring, so no one fabric port is the rank's")
    port = next((p for p in ctx.host.data_plane if p.ip == net.own_address), None)
    if port is None:  # pragma: no cover - engines.fabric takes own_address from one of these ports
        raise _refuse(ctx, var, fact, f"{ctx.host.name} has no data-plane port with {net.own_address}")
    return port


def _value(ctx: RankContext, var: str, fact: HostFact) -> str:
    port = _fabric_port(ctx, var, fact)
    match fact:
        case "fabric_address":
            return port.ip
        case "fabric_prefix_len":
            return str(port.subnet.prefixlen)
        case "rdma_hcas":
            if not ctx.net.hcas:
                raise _refuse(ctx, var, fact, f"{ctx.host.name}'s data-plane ports name no RoCE device (hca)")
            return ",".join(ctx.net.hcas)
        case "roce_gid_index":
            if port.hca is None:
                raise _refuse(ctx, var, fact, f"{port.interface} on {ctx.host.name} names no RoCE device (hca)")
            device = ctx.info.hca(port.hca) if ctx.info is not None and ctx.info.rdma is not None else None
            index = device.roce_v2_ipv4_gids.get(port.ip) if device is not None else None
            return unresolved(fact, ctx.host.name) if index is None else str(index)
    raise AssertionError(f"unhandled host fact {fact}")  # pragma: no cover - HostFact is closed
