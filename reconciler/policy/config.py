"""Rule settings from `policies/rules.yaml`, checked before any rule runs.

The rules file is data a team edits, so a typo must not switch a check off
or make a figure silently fall back to something in code: an unknown rule,
an unknown parameter, a missing required parameter or a value of the wrong
kind is an `InputError` naming the file and the field. A known rule that
the file leaves out does not run, and the verdict says so (see engine.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from reconciler.errors import InputError
from reconciler.spec.lane import EngineKind, KVCacheDtype
from reconciler.spec.policyfiles import ParamValue, RulesFile, Severity
from reconciler.spec.saferegex import check_pattern

RULES_PATH = "policies/rules.yaml"

Kind = Literal["number", "int", "str", "str_list", "number_map"]


@dataclass(frozen=True)
class ParamSpec:
    kind: Kind
    required: bool = True
    default: ParamValue | None = None


MEMORY_BUDGET_PARAMS: dict[str, ParamSpec] = {
    "headroom_warn_gib": ParamSpec("number"),
    "min_sequences": ParamSpec("int", required=False, default=1),
    "overhead_gib": ParamSpec("number_map"),
    "overhead_source": ParamSpec("str"),
    "kv_dtype_bytes": ParamSpec("number_map"),
    "kv_dtype_source": ParamSpec("str", required=False, default=""),
    "mla_slot_bytes": ParamSpec("number_map"),
    "mla_slot_source": ParamSpec("str", required=False, default=""),
    "floor_args": ParamSpec("str_list", required=False, default=[]),
    "drafter_gib": ParamSpec("number_map", required=False, default={}),
    "drafter_source": ParamSpec("str", required=False, default=""),
}

RULE_PARAMS: dict[str, dict[str, ParamSpec]] = {
    "memory-budget": MEMORY_BUDGET_PARAMS,
    "boot-utilization": {},
    "host-sharing": {"capacity": ParamSpec("str", required=False, default="max_boot_utilization")},
    "topology": {},
    "image-digest": {},
    "model-revision": {},
    "port-clash": {},
    "name-clash": {},
    "known-issues": {},
    "engine-flags": {},
    "secrets-by-name": {
        "key_words": ParamSpec("str_list"),
        "value_patterns": ParamSpec("str_list"),
        "secret_args": ParamSpec("str_list", required=False, default=[]),
    },
    "mounts": {"allow": ParamSpec("str_list"), "deny": ParamSpec("str_list")},
    "model-disk": {"margin_gib": ParamSpec("number"), "margin_percent": ParamSpec("number", required=False, default=0)},
    "model-weights": {"tolerance_percent": ParamSpec("number", required=False, default=1)},
}
"""Every rule the engine knows, with the parameters it reads."""

SHARING_CAPACITIES = ("max_boot_utilization", "boot_free", "torch_visible")
MLA_LAYOUTS = ("fp8_ds_mla", "nvfp4_ds_mla")
MODEL_CLASSES = ("dense", "moe", "mla", "hybrid")
"""Classes an overhead figure may be keyed on (`vllm.moe`): see budget.model_classes."""
DRAFTER_FAMILIES = ("mtp", "eagle", "draft_model", "ngram")
"""Speculative decoding families a drafter figure may be given for (engine_memory.speculation)."""


@dataclass(frozen=True)
class RuleSettings:
    name: str
    severity: Severity
    params: Mapping[str, ParamValue] = field(default_factory=dict)

    def number(self, key: str) -> float:
        value = self.params[key]
        assert isinstance(value, int | float)
        assert not isinstance(value, bool)
        return float(value)

    def integer(self, key: str) -> int:
        value = self.params[key]
        assert isinstance(value, int)
        assert not isinstance(value, bool)
        return value

    def text(self, key: str) -> str:
        value = self.params[key]
        assert isinstance(value, str)
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.params[key]
        assert isinstance(value, list)
        return tuple(value)

    def numbers(self, key: str) -> Mapping[str, float]:
        value = self.params[key]
        assert isinstance(value, dict)
        return value


@dataclass(frozen=True)
class Settings:
    """The enabled rules; `missing` lists known rules the file does not mention."""

    rules: Mapping[str, RuleSettings]
    missing: tuple[str, ...] = ()
    configured: Mapping[str, RuleSettings] = field(default_factory=dict)
    """Every rule the file configures, enabled or not (budgets are shown even when the rule is off)."""

    def get(self, name: str) -> RuleSettings | None:
        return self.rules.get(name)


def _kind_ok(kind: Kind, value: object) -> bool:
    if isinstance(value, bool):
        return False
    if kind == "number":
        return isinstance(value, int | float)
    if kind == "int":
        return isinstance(value, int)
    if kind == "str":
        return isinstance(value, str)
    if kind == "str_list":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    return isinstance(value, dict) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value.values()
    )


_KIND_WORDS: dict[Kind, str] = {
    "number": "a number",
    "int": "an integer",
    "str": "a string",
    "str_list": "a list of strings",
    "number_map": "a mapping of names to numbers",
}


def parse_rules(rules: RulesFile, *, path: str = RULES_PATH) -> Settings:
    """Check `rules.yaml` against what the engine knows and return the enabled rules."""
    enabled: dict[str, RuleSettings] = {}
    configured: dict[str, RuleSettings] = {}
    for name, config in rules.rules.items():
        if name not in RULE_PARAMS:
            known = ", ".join(sorted(RULE_PARAMS))
            raise InputError(f"unknown rule '{name}' (known rules: {known})", file=path, field=f"rules.{name}")
        specs = RULE_PARAMS[name]
        for key in config.params:
            if key not in specs:
                known = ", ".join(sorted(specs)) or "none"
                raise InputError(
                    f"unknown parameter '{key}' of rule '{name}' (known: {known})",
                    file=path,
                    field=f"rules.{name}.params.{key}",
                )
        params: dict[str, ParamValue] = {}
        for key, spec in specs.items():
            where = f"rules.{name}.params.{key}"
            if key not in config.params:
                if spec.required:
                    raise InputError(f"rule '{name}' needs parameter '{key}'", file=path, field=where)
                assert spec.default is not None
                params[key] = spec.default
                continue
            value = config.params[key]
            if not _kind_ok(spec.kind, value):
                raise InputError(f"must be {_KIND_WORDS[spec.kind]} (got {value!r})", file=path, field=where)
            params[key] = value
        settings = RuleSettings(name=name, severity=config.severity, params=params)
        _check_values(settings, path)
        configured[name] = settings
        if config.enabled:
            enabled[name] = settings
    missing = tuple(name for name in RULE_PARAMS if name not in rules.rules)
    return Settings(rules=enabled, missing=missing, configured=configured)


def _check_values(settings: RuleSettings, path: str) -> None:
    """Checks of values that a type alone cannot express."""
    name = settings.name
    if name == "memory-budget":
        _covers(settings, "overhead_gib", get_args(EngineKind), path, allow_zero=True)
        _covers(settings, "kv_dtype_bytes", get_args(KVCacheDtype), path, allow_zero=False)
        _covers(settings, "mla_slot_bytes", MLA_LAYOUTS, path, allow_zero=False)
        engines = get_args(EngineKind)
        for key in settings.numbers("overhead_gib"):
            engine, _, cls = key.partition(".")
            if engine not in engines or (cls and cls not in MODEL_CLASSES):
                raise InputError(
                    f"'{key}' is neither an engine ({', '.join(engines)}) nor <engine>.<class> with a class of "
                    f"{', '.join(MODEL_CLASSES)}",
                    file=path,
                    field=f"rules.{name}.params.overhead_gib.{key}",
                )
        for key, value in settings.numbers("drafter_gib").items():
            if key not in DRAFTER_FAMILIES or value < 0:
                raise InputError(
                    f"'{key}' must be one of {', '.join(DRAFTER_FAMILIES)} with a figure of 0 or more",
                    file=path,
                    field=f"rules.{name}.params.drafter_gib.{key}",
                )
        if settings.number("headroom_warn_gib") < 0:
            raise InputError("must not be negative", file=path, field=f"rules.{name}.params.headroom_warn_gib")
        if settings.integer("min_sequences") < 1:
            raise InputError("must be at least 1", file=path, field=f"rules.{name}.params.min_sequences")
    elif name == "host-sharing":
        if settings.text("capacity") not in SHARING_CAPACITIES:
            raise InputError(
                f"must be one of {', '.join(SHARING_CAPACITIES)}",
                file=path,
                field=f"rules.{name}.params.capacity",
            )
    elif name in ("model-disk", "model-weights"):
        for key in settings.params:
            figure = settings.number(key)  # every parameter of these two is a number (checked above)
            if figure < 0:
                raise InputError("must not be negative", file=path, field=f"rules.{name}.params.{key}")
            if key.endswith("_percent") and figure > 100:
                raise InputError("is a percentage: 100 at most", file=path, field=f"rules.{name}.params.{key}")
    elif name == "mounts":
        for key in ("allow", "deny"):
            for index, prefix in enumerate(settings.strings(key)):
                if not prefix.startswith("/"):
                    where = f"rules.{name}.params.{key}[{index}]"
                    raise InputError(f"{prefix!r} is not an absolute host path", file=path, field=where)
    elif name == "secrets-by-name":
        for index, pattern in enumerate(settings.strings("value_patterns")):
            why = check_pattern(pattern)  # policies come from the commit: RE2, linear time (spec.saferegex)
            if why is not None:
                raise InputError(
                    f"pattern {why}",
                    file=path,
                    field=f"rules.{name}.params.value_patterns[{index}]",
                ) from None


def _covers(settings: RuleSettings, key: str, names: tuple[str, ...], path: str, *, allow_zero: bool) -> None:
    table = settings.numbers(key)
    where = f"rules.{settings.name}.params.{key}"
    for wanted in names:
        if wanted not in table:
            raise InputError(
                f"has no entry for '{wanted}' (needs one for each of {', '.join(names)})",
                file=path,
                field=where,
            )
    for entry, value in table.items():
        if value < 0 or (value == 0 and not allow_zero):
            raise InputError(
                f"'{entry}' must be {'0 or more' if allow_zero else 'positive'}",
                file=path,
                field=f"{where}.{entry}",
            )
