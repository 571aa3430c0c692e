"""What the policy evaluation hands back: violations, per-rank budgets, a verdict.

These are plain frozen dataclasses, not pydantic models, because they are
produced by pure code and consumed by the CLI, the daemon and `lanes check
--json`: one shape, with `to_json` the single way they leave the process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from reconciler.engines import ContainerSpec

Severity = Literal["deny", "warn"]
DetailValue = float | int | str | bool
GIB = 1 << 30


def gib(value: float) -> float:
    """Bytes to GiB, rounded for people (one decimal is what messages show)."""
    return round(value / GIB, 2)


@dataclass(frozen=True)
class Violation:
    """One finding: which rule, how bad, where, a sentence to act on, the numbers."""

    rule: str
    severity: Severity
    lane: str | None
    host: str | None
    rank: int | None
    message: str
    detail: Mapping[str, DetailValue] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "lane": self.lane,
            "host": self.host,
            "rank": self.rank,
            "message": self.message,
            "detail": dict(self.detail),
        }


@dataclass(frozen=True, slots=True)
class RankBudget:
    """The memory arithmetic of one rank of one lane, in bytes, in its engine's own terms.

    `budget` is what the engine's memory flag gives and `need` what must fit in it: for vLLM
    (--gpu-memory-utilization, a fraction of total memory) weights + KV + drafter + overhead; for SGLang
    (--mem-fraction-static, a fraction of the free memory at boot) weights + KV + drafter, the overhead
    living in `remainder`, the part of the boot figure outside the fraction.
    """

    lane: str
    rank: int
    host: str
    weights: int
    kv_min: int
    overhead: int
    need: int
    budget: int
    headroom: int
    floor: bool
    notes: tuple[str, ...] = ()
    running: bool = True
    utilization: float = 0.0
    capacity: int = 0
    """torch-visible bytes of the host's hardware profile."""
    kv_parts: Mapping[str, int] = field(default_factory=dict)
    """kv_min split by cache: full, compressed, sliding, indexer, linear."""
    engine: str = "vllm"
    flag: str = "--gpu-memory-utilization"
    """The engine's own name for what sets the budget."""
    base: str = "torch_visible"
    """What the budget is a fraction of (torch_visible, boot_free), or boot_free for an explicit KV size."""
    base_bytes: int = 0
    base_origin: str = "profile"
    """observed (a probe's MemAvailable) or profile (policies/hardware.yaml)."""
    base_source: str = ""
    boot_free: int = 0
    """Free memory a boot on this host would see (the engines' start check compares with it)."""
    boot_free_origin: str = "profile"
    boot_free_source: str = ""
    observed_at: float | None = None
    """When the probe read the free memory the figures used (epoch seconds, the host's clock), if observed."""
    overhead_inside: bool = True
    remainder: int = 0
    """Bytes of the boot figure outside the budget (SGLang: activations and CUDA graphs live there)."""
    drafter: int = 0
    """Speculative decoding's drafter on this rank: its weights and its KV layers."""
    kv_source: str = "max_model_len"
    """What sizes the KV figure: max_model_len x min_sequences, or the flag that fixes the pool."""
    pool: int = 0
    """KV bytes the engine would allocate: the budget left after everything else, or the explicit size."""
    context: int = 0
    """Tokens per sequence that pool holds, up to max_model_len (min_sequences of them)."""
    pool_tokens: int | None = None
    """Tokens the engine's pool holds, counted as the engine counts them, where lanes knows how (SGLang's
    DeepSeek V4 pool: sglangdsv4.py); None elsewhere."""

    def to_json(self) -> dict[str, object]:
        return {
            "lane": self.lane,
            "rank": self.rank,
            "host": self.host,
            "running": self.running,
            "engine": self.engine,
            "flag": self.flag,
            "utilization": self.utilization,
            "weights": self.weights,
            "kv_min": self.kv_min,
            "kv_source": self.kv_source,
            "kv_parts": dict(self.kv_parts),
            "drafter": self.drafter,
            "overhead": self.overhead,
            "overhead_inside_budget": self.overhead_inside,
            "need": self.need,
            "budget": self.budget,
            "headroom": self.headroom,
            "remainder": self.remainder,
            "pool": self.pool,
            "context": self.context,
            "pool_tokens": self.pool_tokens,
            "base": {
                "kind": self.base,
                "bytes": self.base_bytes,
                "origin": self.base_origin,
                "source": self.base_source,
            },
            "boot_free": {
                "bytes": self.boot_free,
                "origin": self.boot_free_origin,
                "source": self.boot_free_source,
                "observed_at": self.observed_at,
            },
            "capacity": self.capacity,
            "floor": self.floor,
            "notes": list(self.notes),
            "gib": {
                "weights": gib(self.weights),
                "kv_min": gib(self.kv_min),
                "drafter": gib(self.drafter),
                "overhead": gib(self.overhead),
                "need": gib(self.need),
                "budget": gib(self.budget),
                "headroom": gib(self.headroom),
                "remainder": gib(self.remainder),
                "pool": gib(self.pool),
                "base": gib(self.base_bytes),
                "boot_free": gib(self.boot_free),
            },
        }


@dataclass(frozen=True)
class Verdict:
    """Everything the policy says about one commit."""

    commit: str
    violations: tuple[Violation, ...]
    budgets: tuple[RankBudget, ...] = ()
    rendered: Mapping[str, tuple[tuple[str, ContainerSpec], ...]] = field(default_factory=dict)
    """(host, container spec) of each rank of every lane that renders (the `render` rule)."""
    ports: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Per rendered lane, what it listens on: `api`, `dist`, `ray`, `ray-workers` -> "8000" or "29000-29007"."""

    @property
    def ok(self) -> bool:
        return not any(v.severity == "deny" for v in self.violations)

    @property
    def denied_lanes(self) -> frozenset[str]:
        return frozenset(v.lane for v in self.violations if v.severity == "deny" and v.lane is not None)

    def lane_violations(self, lane: str) -> list[Violation]:
        return [v for v in self.violations if v.lane == lane]

    def lane_budgets(self, lane: str) -> list[RankBudget]:
        return [b for b in self.budgets if b.lane == lane]

    def to_json(self) -> dict[str, object]:
        """The `lanes check --json` payload: findings, ports, and every lane's per-rank figures, fit or not."""
        lanes: dict[str, list[dict[str, object]]] = {}
        for b in self.budgets:
            lanes.setdefault(b.lane, []).append(b.to_json())
        return {
            "commit": self.commit,
            "ok": self.ok,
            "violations": [v.to_json() for v in self.violations],
            "ports": {lane: dict(ports) for lane, ports in sorted(self.ports.items())},
            "budgets": {lane: {"ranks": ranks} for lane, ranks in sorted(lanes.items())},
        }
