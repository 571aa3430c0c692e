"""Benchmark profiles (`state/bench-profiles.yaml`): what `lanes bench` measures.

A profile is a grid in llama-bench notation: every prompt size (pp) x
generation size (tg) x depth (context tokens before the prompt) x
concurrency, each measured `repetitions` times after `warmup` discarded
runs. Prompts are generated from `seed`, so two runs of one profile send the
same text and their numbers can be compared. A lane names its profile in
`bench_profile`; the noise rule that decides whether a change against the
previous evidence is real lives here too, so a team tunes it in git.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from reconciler.spec.base import Name, StrictModel
from reconciler.spec.yamlsrc import parse_yaml, validate

DEFAULT_PROFILE = "default"
PROFILES_FILE = "bench-profiles.yaml"


def _distinct_positive(values: tuple[int, ...], what: str, *, allow_zero: bool = False) -> tuple[int, ...]:
    low = 0 if allow_zero else 1
    for v in values:
        if v < low:
            raise ValueError(f"{what} must be >= {low}, not {v}")
    if len(set(values)) != len(values):
        raise ValueError(f"{what} lists a value twice")
    return values


class NoiseRule(StrictModel):
    """When a difference against the baseline counts as real rather than noise.

    A change is beyond noise when |delta| > k x sqrt(std_now^2 + std_base^2)
    AND |delta| / |baseline| > min_relative. The first term scales with the
    spread the two runs actually showed; the second keeps a run with one
    repetition (std 0) or a very steady stand-in from flagging a 0.1% wobble.
    """

    k: float = Field(default=2.0, gt=0, description="multiple of the combined standard deviation")
    min_relative: float = Field(default=0.03, ge=0, lt=1, description="smallest relative change that counts")


class BenchProfile(StrictModel):
    """One benchmark grid."""

    name: Name
    description: str = ""
    pp: tuple[int, ...] = Field(default=(2048,), min_length=1, description="prompt sizes in tokens (llama-bench pp)")
    tg: tuple[int, ...] = Field(default=(128,), min_length=1, description="generated tokens per request (tg)")
    depth: tuple[int, ...] = Field(default=(0,), min_length=1, description="context tokens before the prompt")
    concurrency: tuple[int, ...] = Field(default=(1,), min_length=1, description="requests in flight at once")
    repetitions: int = Field(default=3, ge=1, le=100, description="measured runs per grid point")
    warmup: int = Field(default=1, ge=0, le=10, description="discarded runs per grid point before measuring")
    seed: int = Field(default=1017, ge=0, description="prompts are generated from this seed")
    fresh_prefix: bool = Field(
        default=True,
        description="start every prompt of a run with words of its own, so no prefix cache holds it from a "
        "previous run (false: byte-identical prompts across runs)",
    )
    prefix_cached: bool = Field(
        default=False,
        description="llama-benchy's --enable-prefix-caching: at each depth above 0, send every request's context "
        "alone first (the ctx rows), then context and prompt, so pp and tg measure a prompt that follows a "
        "cached context and pp counts the prompt's tokens only",
    )
    api: Literal["completions", "chat"] = Field(
        default="completions", description="/v1/completions (exact token counts) or /v1/chat/completions"
    )
    latency_mode: Literal["generation", "api", "none"] = Field(
        default="generation",
        description="what is subtracted from the time to first response to estimate prompt processing time",
    )
    request_timeout_s: float = Field(default=900.0, gt=0, description="one request, from send to last byte")
    noise: NoiseRule = NoiseRule()

    @field_validator("pp", "tg", "concurrency")
    @classmethod
    def _positive(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        return _distinct_positive(value, "every size and concurrency")

    @field_validator("depth")
    @classmethod
    def _depths(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        return _distinct_positive(value, "depth", allow_zero=True)

    def longest_context(self) -> int:
        """Tokens the biggest request needs in the context window (prompt + depth + generated)."""
        return max(self.pp) + max(self.depth) + max(self.tg)

    def grid_points(self) -> int:
        return len(self.pp) * len(self.tg) * len(self.depth) * len(self.concurrency)


class BenchProfilesFile(StrictModel):
    """`state/bench-profiles.yaml`: profiles by name (the key is the profile's name)."""

    profiles: dict[Name, BenchProfile] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _names_from_keys(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or not isinstance(data.get("profiles"), Mapping):
            return data
        profiles: dict[Any, Any] = {}
        for key, body in data["profiles"].items():
            if isinstance(body, Mapping):
                if "name" in body and body["name"] != key:
                    raise ValueError(f"profile '{key}' says its name is '{body['name']}'; drop the name or match it")
                profiles[key] = {**body, "name": key}
            else:
                profiles[key] = body
        return {**data, "profiles": profiles}

    def get(self, name: str) -> BenchProfile | None:
        return self.profiles.get(name)


def load_bench_profiles(files: Mapping[str, bytes], *, state_dir: str = "state") -> BenchProfilesFile:
    """The profiles of one commit; a state repo without the file gets the built-in `default`."""
    path = f"{state_dir}/{PROFILES_FILE}"
    if path not in files:
        return BenchProfilesFile(profiles={DEFAULT_PROFILE: BenchProfile(name=DEFAULT_PROFILE)})
    return validate(BenchProfilesFile, parse_yaml(path, files[path]))
