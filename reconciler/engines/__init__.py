"""engines: render a lane rank into a container spec and a `docker run` argv, one module per engine.

Pure: no I/O, no shell strings. Every lane field stays one argv item. The labels the renderers
write are defined in `reconciler.facts.labels`, the host protocol's one home.
"""

from reconciler.engines.base import (
    HF_CACHE_TARGET,
    ContainerSpec,
    RankContext,
    compute_spec_hash,
    container_name,
    docker_run_argv,
)
from reconciler.engines.registry import RENDERERS, render_lane, render_rank, start_groups

__all__ = [
    "HF_CACHE_TARGET",
    "RENDERERS",
    "ContainerSpec",
    "RankContext",
    "compute_spec_hash",
    "container_name",
    "docker_run_argv",
    "render_lane",
    "render_rank",
    "start_groups",
]
