"""The gateway on the control node (`gateway:` in `state/fleet.yaml`): where it listens, which models it serves.

Clients send every request for a served model name to the gateway; the gateway forwards it to a lane that
serves that name, one of the lanes listed under it (several lanes: replicas of the model). Which workers the
gateway holds is derived from the lanes' state (`reconciler.gateway.routes`), never written here.

The listener defaults to loopback: a gateway that answers the network is a choice the state says out loud.
"""

from __future__ import annotations

import ipaddress

from pydantic import Field, field_validator

from reconciler.spec.base import Name, StrictModel

SERVED_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$"
"""A served model name as clients send it (`Qwen/Qwen3-235B-A22B-FP8`, `glm-4.5-air`): it travels in JSON bodies
and SMG's /workers payloads, so no spaces, quotes or control characters."""


class Analysis(StrictModel):
    """What a rollout through the gateway watches, and what fails it (thresholds for every lane, or for one).

    The defaults follow Argo Rollouts' and Flagger's shapes (a window, a failure threshold on an error rate, a
    bound on how long a step may take), sized for engines that answer in seconds, not for web services."""

    watch_s: float = Field(
        default=120.0,
        ge=0,
        le=3600,
        description="blue/green: seconds the new lane takes the traffic while the old lane still runs (0: none)",
    )
    max_error_rate: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="the largest share of the new lane's requests that may fail in the watch window (the gateway's "
        "circuit-breaker outcomes for its worker) before the traffic goes back to the old lane",
    )
    min_requests: int = Field(
        default=1,
        ge=0,
        le=1_000_000,
        description="requests the window must see before its error rate decides (fewer: the engine's own health "
        "check alone decides)",
    )
    max_ttft_s: float | None = Field(
        default=None,
        gt=0,
        le=600,
        description="the longest a first token of the new lane may take in the watch window, asked of its engine "
        "each look (unset: not judged)",
    )
    max_slowdown: float | None = Field(
        default=0.2,
        ge=0,
        le=10,
        description="blue/green's pre-promotion analysis: a short benchmark of the old and the new head side by "
        "side before the route moves; the new one fails when its decode rate falls or its first token grows by "
        "more than this share (unset: no analysis)",
    )
    drain_s: float = Field(
        default=60.0,
        ge=0,
        le=3600,
        description="the longest a lane taken out of its route waits for its requests in flight to finish "
        "before its ranks stop",
    )


class Gateway(StrictModel):
    """The gateway's listener and the served model names it routes, each to the lanes that serve it."""

    host: str = Field(default="127.0.0.1", description="the IP address the gateway listens on (loopback by default)")
    port: int = Field(default=30000, ge=1, le=65535, description="the gateway's port (SMG's default, 30000)")
    metrics_port: int = Field(
        default=29000,
        ge=1,
        le=65535,
        description="the gateway's Prometheus listener, on the same address (SMG's default port, 29000)",
    )
    models: dict[str, tuple[Name, ...]] = Field(
        default_factory=dict,
        description="served model name -> the lanes that serve it (several: replicas); each lane's served name "
        "must be this name, and a lane is listed under one model at most",
    )
    analysis: Analysis = Field(
        default_factory=Analysis, description="rollout thresholds for every routed lane (reconciler.plan.rollout)"
    )
    lanes: dict[Name, Analysis] = Field(
        default_factory=dict, description="a lane's own rollout thresholds, in place of `analysis` (whole)"
    )

    @field_validator("host")
    @classmethod
    def _ip_address(cls, value: str) -> str:
        # An IP, not a name: the listener binds it, and a name resolving elsewhere would move the gateway.
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(
                f"{value!r} is not an IP address (the gateway binds it; 127.0.0.1 keeps it local)"
            ) from None
        return value

    @field_validator("models")
    @classmethod
    def _models(cls, models: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        import re

        seen: dict[str, str] = {}
        for name, lanes in models.items():
            if not re.fullmatch(SERVED_NAME_PATTERN, name):
                raise ValueError(f"{name!r} is not a served model name (letters, digits and . _ : / @ + -)")
            if not lanes:
                raise ValueError(f"model {name!r} lists no lane")
            for lane in lanes:
                if lane in seen:
                    where = "twice" if seen[lane] == name else f"also under {seen[lane]!r}"
                    raise ValueError(f"lane {lane!r} is listed under {name!r} {where}; a lane serves one model")
                seen[lane] = name
        return models

    def analysis_of(self, lane: str) -> Analysis:
        """The thresholds a rollout of `lane` is judged by: its own, else the gateway's."""
        return self.lanes.get(lane, self.analysis)

    def model_of(self, lane: str) -> str | None:
        """The served model name `lane` is listed under, or None."""
        return next((name for name, lanes in self.models.items() if lane in lanes), None)
