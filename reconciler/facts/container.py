"""`ContainerSpec`: one rank's container as data, exactly what `docker run` receives.

It lives in `facts`, below the renderers, because it is the input of the
`docker run` argv (`facts/docker.py`), and every docker command lanes sends
is built in `facts`. The engine renderers (`engines/`) produce it and compute
its hash; they import it from here (and `reconciler.engines` re-exports it,
which is where the planner and the executor take it from).
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.spec import Mount


@dataclass(frozen=True, kw_only=True)
class ContainerSpec:
    """One rank's container, as data: what `docker run` gets, plus the hash of it."""

    name: str
    image: str
    command: tuple[str, ...]
    """argv after the image."""
    entrypoint: str | None
    env: tuple[tuple[str, str], ...]
    """Sorted; never a secret value."""
    secret_env: tuple[str, ...]
    """Names of the variables the env file provides (values never here)."""
    env_file: str | None
    """Path on the host of the 0600 env file, when the lane has secrets."""
    labels: tuple[tuple[str, str], ...]
    """Sorted."""
    mounts: tuple[Mount, ...]
    network: str = "host"
    ipc: str = "host"
    gpus: str = "all"
    shm_size: str | None = None
    privileged: bool = False
    devices: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    ulimits: tuple[str, ...] = ()
    """`name=soft[:hard]`, as `docker run --ulimit` takes them."""
    security_opt: tuple[str, ...] = ()
    memory: str | None = None
    """`--memory`, and `--memory-swap` the same: no swap beyond the cap."""
    oom_score_adj: int | None = None
    spec_hash: str
    serves_http: bool
    """True for the rank that serves the OpenAI API (the head)."""

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)

    @property
    def env_map(self) -> dict[str, str]:
        return dict(self.env)
