"""Generic: any OpenAI-compatible server image; the lane's `args` are the whole command.

For engines lanes does not know (llama.cpp, TensorRT-LLM, a team's own
build) the lane spells the command itself, passed after the image to its
own entrypoint. What lanes still provides: the container flags, the HF
cache and model mounts, the data-plane environment, and for
multi-rank lanes the torchrun-style topology variables (NNODES, NODE_RANK,
MASTER_ADDR, MASTER_PORT) that most launchers read.
"""

from __future__ import annotations

from reconciler.engines.base import RankContext, seal
from reconciler.errors import InputError
from reconciler.facts.container import ContainerSpec


def render(ctx: RankContext) -> ContainerSpec:
    if ctx.lane.ep > 1:
        raise InputError(
            f"lane '{ctx.lane.name}': a generic lane's command is its args, so lanes cannot pass ep "
            f"{ctx.lane.ep} to it; set ep: 1 and put the engine's own expert-parallel option in args",
            field="ep",
        )
    env: dict[str, str] = {}
    if ctx.multi_node:
        env = {
            "NNODES": str(ctx.ranks),
            "NODE_RANK": str(ctx.rank),
            "MASTER_ADDR": ctx.head_address,
            "MASTER_PORT": str(ctx.ports.dist),
        }
    return seal(ctx, image=ctx.lane.image, entrypoint=None, command=ctx.lane.args, engine_env=env)
