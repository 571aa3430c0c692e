"""One entry of bench/corpus/: a public recipe that was run on DGX Sparks, with what its authors saw.

An entry is data someone copied from a public page, so it is validated as strictly as a
state file: unknown keys, missing fields and wrong types are refused with the file and
the field named (reconciler.errors.InputError, the error `lanes check` uses for state),
and a measured figure must say where it was published. Nothing here judges the recipe;
bench/corpus.py does, with lanes' own loaders and policy engine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from reconciler.errors import InputError

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "tests" / "fixtures" / "model-configs"
CORPUS = Path(__file__).resolve().parent / "corpus"
Outcome = Literal["ran", "oom", "failed-to-start"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Strict):
    url: str = Field(pattern=r"^https://")
    says: str = Field(min_length=1, description="what the page says, in the corpus author's words")


class ModelRef(_Strict):
    """The checkpoint served: a recorded config.json, or (no public config) a model file of the example state."""

    hf_repo: str = Field(min_length=1)
    config: str | None = Field(default=None, description="a folder of tests/fixtures/model-configs/")
    model_file: str | None = Field(default=None, pattern=r"^state/models/[a-z0-9.-]+\.yaml$")
    weight_bytes: int | None = Field(default=None, gt=0, description="of the checkpoint served, when not the config's")
    weight_bytes_exact: bool | None = None
    weight_source: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ModelRef:
        if (self.config is None) == (self.model_file is None):
            raise ValueError("give exactly one of config (a recorded config.json) or model_file")
        if self.weight_bytes is not None and not self.weight_source:
            raise ValueError("weight_bytes needs weight_source: where the size was published")
        if self.model_file is not None and self.weight_bytes is not None:
            raise ValueError("a model_file carries its own weight_bytes")
        return self


class Serving(_Strict):
    """The flags that decide memory, in lanes' lane fields; the rest of the recipe's argv is left out."""

    gpu_memory_utilization: float = Field(gt=0, le=1, description="vLLM's fraction, or SGLang's mem-fraction-static")
    max_model_len: int = Field(ge=1, description="vLLM --max-model-len, SGLang --context-length")
    kv_cache_dtype: str = "auto"
    max_num_seqs: int | None = Field(default=None, ge=1)
    offloaded_weight_bytes: int = Field(default=0, ge=0)
    args: tuple[str, ...] = ()


class Measured(_Strict):
    tokens: int = Field(gt=0)
    line: str = Field(min_length=1, description="which of the engine's lines the figure is")
    source: str = Field(pattern=r"^https://")


class FreeAtBoot(_Strict):
    """The free memory (MemAvailable) the recipe's authors read on their Sparks at boot, as they published it.

    lanes takes a host's observed MemAvailable when idle over the hardware profile's boot_free
    (reconciler/policy/hostmem.py); an entry that publishes its hosts' reading is judged with it, as
    lanes would judge a fleet it has probed. Never read backwards from the pool the entry measured."""

    bytes: int = Field(gt=0)
    source: str = Field(pattern=r"^https://")
    says: str = Field(min_length=1, description="what the page says, in the corpus author's words")


class Entry(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    recipe: Source
    outcome_source: Source
    engine: Literal["vllm", "sglang"]
    engine_version: str = Field(min_length=1)
    note: str | None = None
    model: ModelRef
    sparks: int = Field(ge=1)
    tp: int = Field(ge=1)
    pp: int = Field(default=1, ge=1)
    dcp: int = Field(default=1, ge=1)
    ep: int = Field(default=1, ge=1)
    serving: Serving
    outcome: Outcome
    reason: str = Field(min_length=1)
    measured_pool: Measured | None = None
    free_at_boot: FreeAtBoot | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Entry:
        if self.tp * self.pp != self.sparks:
            raise ValueError(f"tp x pp ({self.tp} x {self.pp}) is not sparks ({self.sparks}): one rank per Spark")
        if self.measured_pool is not None and self.outcome != "ran":
            raise ValueError("a measured pool belongs to a recipe that ran")
        return self

    @property
    def slug(self) -> str:
        """The model's name in the state repo built for this entry."""
        if self.model.model_file is not None:
            return Path(self.model.model_file).stem
        assert self.model.config is not None
        return self.model.config.replace(".", "-")


def _field(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def load_entry(path: Path) -> Entry:
    """Parse and validate one entry; an InputError names the file and the field at fault."""
    shown = path.name
    try:
        data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    except YAMLError as exc:
        raise InputError(f"not YAML: {exc}", file=shown) from exc
    if not isinstance(data, dict):
        raise InputError("an entry is a mapping of fields", file=shown)
    try:
        entry = Entry.model_validate(data)
    except ValidationError as exc:
        # A misspelt key is also a missing one: name the stranger first, it is the one to fix.
        first = min(exc.errors(), key=lambda err: err["type"] != "extra_forbidden")
        raise InputError(first["msg"], file=shown, field=_field(first["loc"])) from exc
    if entry.name != path.stem:
        raise InputError(f"name {entry.name!r} differs from the file name {path.stem!r}", file=shown, field="name")
    if entry.model.config is not None and not (CONFIGS / entry.model.config / "config.json").is_file():
        raise InputError(f"no recorded config {entry.model.config!r} under {CONFIGS}", file=shown, field="model.config")
    if entry.model.model_file is not None and not (REPO / entry.model.model_file).is_file():
        raise InputError(f"no model file {entry.model.model_file}", file=shown, field="model.model_file")
    return entry


def load_corpus(folder: Path = CORPUS) -> list[Entry]:
    entries = [load_entry(path) for path in sorted(folder.glob("*.yaml"))]
    if not entries:
        raise InputError("no entries", file=str(folder))
    return entries


def checkpoint(entry: Entry) -> tuple[dict[str, Any], int, bool]:
    """(config.json, weight bytes, whether that size is a published total) of an entry with a recorded config."""
    assert entry.model.config is not None
    folder = CONFIGS / entry.model.config
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    sidecar = YAML(typ="safe").load((folder / "source.yaml").read_text(encoding="utf-8"))
    if entry.model.weight_bytes is not None:
        return config, entry.model.weight_bytes, bool(entry.model.weight_bytes_exact)
    return config, int(sidecar["weight_bytes"]), bool(sidecar["weight_bytes_exact"])
