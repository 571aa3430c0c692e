"""engines: render a lane rank into a container spec, one module per engine.

Pure: no I/O, no shell strings. Every lane field stays one argv item. The labels the renderers
write are defined in `reconciler.facts.labels`, and `ContainerSpec` with its `docker run` argv in
`reconciler.facts.container` and `reconciler.facts.docker`: the host protocol's one home.
"""

from reconciler.engines.base import (
    HF_CACHE_TARGET,
    RankContext,
    compute_spec_hash,
    container_name,
)
from reconciler.engines.registry import RENDERERS, render_lane, render_rank, start_groups
from reconciler.facts.container import ContainerSpec

__all__ = [
    "HF_CACHE_TARGET",
    "RENDERERS",
    "ContainerSpec",
    "RankContext",
    "compute_spec_hash",
    "container_name",
    "render_lane",
    "render_rank",
    "start_groups",
]
