"""Lane files (`state/lanes/<lane>.yaml`): one serving deployment.

A lane is what the team edits and pushes: model, engine image pinned by
digest, topology over hosts (the first host is the head), serving flags.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from reconciler.spec.base import AbsPath, Name, StrictModel
from reconciler.spec.bench import BenchProfile

EngineKind = Literal["sglang", "vllm", "flare", "generic"]
HostFact = Literal["fabric_address", "fabric_prefix_len", "rdma_hcas", "roce_gid_index"]
"""What a `host_env` variable takes from its rank's host (`reconciler.engines.hostfacts` says where each is read)."""
KVCacheDtype = Literal[
    "auto",
    "bf16",
    "bfloat16",
    "fp16",
    "float16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "nvfp4",
    "fp8_ds_mla",
    "nvfp4_ds_mla",
]
DIGEST_RE = re.compile(r"@sha256:[0-9a-f]{64}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Mount(StrictModel):
    source: AbsPath = Field(description="absolute path on the host")
    target: AbsPath = Field(description="absolute path in the container")
    read_only: bool = False


class SecretRef(StrictModel):
    """A secret by name; its value lives on the control node, never in git."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="credential name on the control node")
    env: str = Field(description="environment variable the container reads it from")

    @field_validator("env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if not ENV_NAME_RE.match(value):
            raise ValueError(f"'{value}' is not an environment variable name")
        return value


class Health(StrictModel):
    """Readiness gate stages; defaults sized for big models that load for tens of minutes."""

    port_timeout_s: float = Field(default=600, gt=0, description="until the port listens")
    ready_timeout_s: float = Field(default=2400, gt=0, description="until /health answers 200")
    models_timeout_s: float = Field(default=120, gt=0, description="until /v1/models lists the served model")
    completion_timeout_s: float = Field(default=300, gt=0, description="until one streamed token arrives")
    poll_interval_s: float = Field(default=2.0, gt=0)
    path: str = Field(default="/health", pattern=r"^/")


class Track(StrictModel):
    """Follow an upstream source: new qualifying releases become proposal branches."""

    source: str = Field(description="a source name in state/upstreams.yaml")
    image: str = Field(description="image reference template, e.g. 'lmsysorg/sglang:{version}-cu130'")
    versions: str = Field(default="", description="PEP 440 specifier the version must satisfy, e.g. '>=0.5.22'")
    prereleases: bool = False
    max_open: int = Field(default=2, ge=1, description="open proposals at most for this lane")
    trial_hosts: tuple[str, ...] = ()


class Lane(StrictModel):
    """One serving deployment over one or more hosts."""

    name: Name
    description: str = ""
    desired: Literal["running", "stopped"] = "running"
    engine: EngineKind
    launcher: Literal["native", "ray"] = Field(
        default="native", description="vLLM multi-node: 'native' (--nnodes/--headless) or 'ray' (head + workers)"
    )
    engine_version: str = Field(min_length=1, description="the engine's own version string inside the image")
    image: str = Field(min_length=1, description="image reference, pinned as repo@sha256:<digest>")
    image_built: str | None = Field(default=None, description="build date of the image (YYYY-MM-DD)")
    model: Name
    served_model_name: str | None = None
    hosts: tuple[Name, ...] = Field(min_length=1, description="hosts in rank order; the first is the head")
    tp: int = Field(default=1, ge=1)
    pp: int = Field(default=1, ge=1)
    ep: int = Field(default=1, ge=1)
    dcp: int = Field(default=1, ge=1, description="decode context parallel: divides the KV cache only")
    max_model_len: int = Field(ge=1)
    max_num_seqs: int = Field(default=8, ge=1)
    kv_cache_dtype: KVCacheDtype = "auto"
    gpu_memory_utilization: float = Field(
        gt=0,
        le=1,
        description="rendered as the engine's own flag: vLLM --gpu-memory-utilization (a fraction of total "
        "memory), SGLang --mem-fraction-static (a fraction of the free memory at boot)",
    )
    offloaded_weight_bytes: int = Field(
        default=0,
        ge=0,
        description="bytes of the model's weights this lane's engine keeps off the GPU (e.g. MoE experts a fork "
        "streams from NVMe): declared here, never guessed; the rest is split over tp x pp",
    )
    port: int = Field(default=8000, ge=1, le=65535)
    args: tuple[str, ...] = Field(default=(), description="extra engine arguments, passed as argv items")
    env: dict[str, str] = Field(default_factory=dict)
    host_env: dict[str, HostFact] = Field(
        default_factory=dict,
        description="environment variables whose value differs per rank, taken from a fact of the rank's host "
        "(reconciler.engines.hostfacts): fabric_address, fabric_prefix_len and rdma_hcas from the host file's "
        "data_plane, roce_gid_index read by the probe; rendered per rank and shown in `lanes plan`",
    )
    mounts: tuple[Mount, ...] = ()
    secrets: tuple[SecretRef, ...] = ()
    health: Health = Health()
    bench_profile: str | BenchProfile | None = Field(
        default=None,
        description="a profile name in state/bench-profiles.yaml, or a profile written inline in the lane file",
    )
    upstream: str | None = Field(default=None, description="source in upstreams.yaml this lane's engine follows")
    track: Track | None = None
    suspended: bool = Field(
        default=False,
        description="hands off: lanes leaves what runs as it is (no apply, no drift repair, no rollback) and says "
        "so; set it back to false (or remove it) and the lane converges again",
    )
    change_window: Name | None = Field(
        default=None,
        description="a window in policies/windows.yaml: a change that restarts this running lane waits for it "
        "(besides any window that selects the lane by name or host label)",
    )
    after: tuple[Name, ...] = Field(
        default=(),
        description="lanes this lane is applied after when both change in one commit (where order matters "
        "beyond a swap, whose stops always go first); each must be a lane of the state, without cycles",
    )

    @field_validator("env", "host_env")
    @classmethod
    def _env_names(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if not ENV_NAME_RE.match(key):
                raise ValueError(f"'{key}' is not an environment variable name")
        return value

    @model_validator(mode="after")
    def _host_env_apart(self) -> Lane:
        # One value per variable: a host fact and a plain value (or a secret) for the same name would leave
        # which one a rank gets to the order of rendering.
        plain = set(self.env) | {s.env for s in self.secrets}
        both = sorted(set(self.host_env) & plain)
        if both:
            raise ValueError(f"host_env: {', '.join(both)} also set in env or secrets; give each variable one value")
        return self

    @model_validator(mode="before")
    @classmethod
    def _inline_profile_name(cls, data: Any) -> Any:
        # An inline profile needs no name of its own: it is the lane's.
        if isinstance(data, dict) and isinstance(data.get("bench_profile"), dict):
            profile = dict(data["bench_profile"])
            profile.setdefault("name", str(data.get("name", "inline")))
            data = {**data, "bench_profile": profile}
        return data

    @model_validator(mode="after")
    def _distinct_hosts(self) -> Lane:
        seen: set[str] = set()
        for host in self.hosts:
            if host in seen:
                raise ValueError(f"host '{host}' is listed twice")
            seen.add(host)
        return self

    @property
    def ranks(self) -> int:
        return len(self.hosts)

    @property
    def head(self) -> str:
        return self.hosts[0]

    @property
    def running(self) -> bool:
        return self.desired == "running"

    @property
    def image_pinned(self) -> bool:
        return bool(DIGEST_RE.search(self.image))

    @property
    def served_name(self) -> str:
        return self.served_model_name or self.model


def after_problems(lanes: Mapping[str, Lane]) -> list[tuple[str, str]]:
    """(lane, why) for each `after:` that names no lane of the state, names the lane itself, or closes a cycle."""
    problems: list[tuple[str, str]] = []
    for name in sorted(lanes):
        for dep in lanes[name].after:
            if dep == name:
                problems.append((name, f"after: '{dep}' is this lane itself"))
            elif dep not in lanes:
                problems.append((name, f"after: '{dep}' is not a lane (known: {', '.join(sorted(lanes))})"))
    if problems:
        return problems
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> list[str] | None:
        state[name] = 1
        for dep in lanes[name].after:
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep] if dep in path else [*path, dep]
            if dep not in state and (cycle := visit(dep, [*path, dep])) is not None:
                return cycle
        state[name] = 2
        return None

    for name in sorted(lanes):
        if name not in state and (cycle := visit(name, [name])) is not None:
            return [(cycle[0], f"after: lanes wait for each other in a cycle ({' -> '.join(cycle)})")]
    return []
