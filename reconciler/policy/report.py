"""The shape of `lanes check --json`, as pydantic models: `lanes schema --kind check` writes its JSON Schema.

`Verdict.to_json` builds the payload from plain dataclasses (verdict.py);
these models describe it, and the tests validate real payloads against them
(extra fields forbidden, strict types), so the schema a CI job reads cannot
drift from what `lanes check --json` prints.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

Origin = Literal["observed", "profile"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class BaseFigure(_Strict):
    """What the budget is a fraction of, and where that figure came from."""

    kind: Literal["torch_visible", "boot_free"] = Field(
        description="torch_visible: total device memory (vLLM's base); boot_free: free memory at boot (SGLang's, "
        "and vLLM's with --kv-cache-memory-bytes)"
    )
    bytes: int
    origin: Origin = Field(description="observed: a probe's MemAvailable; profile: policies/hardware.yaml")
    source: str


class BootFreeFigure(_Strict):
    """Free memory a boot on the rank's host would see (the engines' start check compares with it)."""

    bytes: int
    origin: Origin
    source: str
    observed_at: float | None = Field(description="epoch seconds (the host's clock) the probe read it, if observed")


class RankFigures(_Strict):
    """One rank of one lane, in bytes and in its engine's own terms (reconciler/policy/budget.py)."""

    lane: str
    rank: int
    host: str
    running: bool
    engine: Literal["vllm", "sglang", "flare", "generic"]
    flag: str = Field(description="the engine's name for what sets the budget, e.g. --mem-fraction-static")
    utilization: float | int
    weights: int
    kv_min: int = Field(description="KV for max_model_len x min_sequences, or the explicit KV size")
    kv_source: str
    kv_parts: dict[str, int]
    drafter: int
    overhead: int
    overhead_inside_budget: bool = Field(description="vLLM: yes; SGLang: no, it lives in the remainder")
    need: int
    budget: int
    headroom: int = Field(description="budget - need; negative when the rank does not fit")
    remainder: int = Field(description="SGLang: the boot figure outside --mem-fraction-static")
    pool: int = Field(description="KV bytes the engine would allocate")
    context: int = Field(description="tokens per sequence that pool holds, up to max_model_len")
    pool_tokens: int | None = Field(
        default=None,
        description="tokens the pool holds counted as the engine counts them (SGLang's DeepSeek V4 pool); "
        "null where lanes does not know the engine's count",
    )
    base: BaseFigure
    boot_free: BootFreeFigure
    capacity: int = Field(description="torch-visible bytes of the host's hardware profile")
    floor: bool = Field(description="a drafter of unknown method is not sized: the need is a floor")
    notes: list[str]
    gib: dict[str, float | int] = Field(description="the same figures in GiB, rounded for people")


class LaneFigures(_Strict):
    ranks: list[RankFigures]


DetailValue = StrictBool | StrictInt | StrictFloat | StrictStr


class Finding(_Strict):
    rule: str
    severity: Literal["deny", "warn"]
    lane: str | None
    host: str | None
    rank: int | None
    message: str
    detail: dict[str, DetailValue]


class CheckReport(_Strict):
    """`lanes check --json`: the verdict, every lane's per-rank figures (fitting or not), its ports."""

    commit: StrictStr
    ok: bool
    violations: list[Finding]
    ports: dict[str, dict[str, str]]
    budgets: dict[str, LaneFigures] = Field(description="per lane, every rank whose host has a hardware profile")
