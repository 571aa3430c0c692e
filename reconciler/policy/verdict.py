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


@dataclass(frozen=True)
class RankBudget:
    """The memory arithmetic of one rank of one lane, in bytes."""

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
    """torch-visible bytes of the host's hardware profile (the budget's base)."""
    kv_parts: Mapping[str, int] = field(default_factory=dict)
    """kv_min split by cache: full, compressed, sliding, indexer, linear."""

    def to_json(self) -> dict[str, object]:
        return {
            "lane": self.lane,
            "rank": self.rank,
            "host": self.host,
            "running": self.running,
            "weights": self.weights,
            "kv_min": self.kv_min,
            "overhead": self.overhead,
            "need": self.need,
            "budget": self.budget,
            "headroom": self.headroom,
            "utilization": self.utilization,
            "capacity": self.capacity,
            "floor": self.floor,
            "notes": list(self.notes),
            "kv_parts": dict(self.kv_parts),
            "need_gib": gib(self.need),
            "budget_gib": gib(self.budget),
            "headroom_gib": gib(self.headroom),
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

    def to_json(self, *, include_budgets: bool = False) -> dict[str, object]:
        out: dict[str, object] = {
            "commit": self.commit,
            "ok": self.ok,
            "violations": [v.to_json() for v in self.violations],
            "ports": {lane: dict(ports) for lane, ports in sorted(self.ports.items())},
        }
        if include_budgets:
            out["budgets"] = [b.to_json() for b in self.budgets]
        return out
