"""msgspec as the engine's flag registration uses it, in pure Python (msgspec itself is a C extension).

SGLang 0.5.20 on declares its server arguments as `msgspec.Struct` namespaces
(`sglang/srt/arg_groups/fields/*.py`), gathers their fields with
`msgspec.structs.fields` and `typing.get_type_hints` (`collect_input_fields`),
assembles `ServerArgs` with `msgspec.defstruct`, and registers one flag per
annotated field (`arg_utils.add_cli_args_from_dataclass`, through
`record_fields`). What that needs of msgspec is modelled here as msgspec
defines it:

- a Struct's fields are its annotated, non-ClassVar class attributes, its
  bases' first (`_NS_PATH = "model"` and other unannotated attributes are not
  fields);
- `structs.fields(cls)` answers `FieldInfo`s whose missing default and
  default factory are `NODEFAULT` (not dataclasses' MISSING);
- `field(default=..., default_factory=...)` marks a field's default;
- `defstruct(name, fields, namespace=...)` makes a Struct class of the given
  `name`, `(name, type)` or `(name, type, default)` fields, keeping the
  namespace's methods.

A Struct class the interpreter builds keeps its fields in `FIELDS_ATTR` as
`dataclasses.Field`s (as a dataclass keeps them in `__dataclass_fields__`),
so the interpreter constructs its instances the same way; it is not a
dataclass (`dataclasses.is_dataclass` answers False, as for a real Struct).
"""

from __future__ import annotations

import dataclasses
import types
from typing import TYPE_CHECKING, Any, NamedTuple

from scripts.flagtables.values import StubMeta

if TYPE_CHECKING:
    from scripts.flagtables.interp import Interp

FIELDS_ATTR = "__lanes_struct_fields__"


class _NoDefault:
    def __repr__(self) -> str:
        return "NODEFAULT"


NODEFAULT: Any = _NoDefault()


class Struct:
    """The base of every Struct class: only what `issubclass(cls, msgspec.Struct)` needs."""

    def __init_subclass__(cls, **_options: object) -> None:
        # frozen=, kw_only=, dict=, ... change nothing about which flags a Struct declares.
        super().__init_subclass__()


class FieldInfo(NamedTuple):
    name: str
    encode_name: str
    type: Any
    default: Any = NODEFAULT
    default_factory: Any = NODEFAULT

    @property
    def required(self) -> bool:
        return self.default is NODEFAULT and self.default_factory is NODEFAULT


def field(*, default: Any = NODEFAULT, default_factory: Any = NODEFAULT, name: str | None = None) -> Any:
    """A field's default, as a `dataclasses.Field` the interpreter's class builder already reads."""
    if default is not NODEFAULT and default_factory is not NODEFAULT:
        raise TypeError("Cannot set both `default` and `default_factory`")
    if default_factory is not NODEFAULT:
        return dataclasses.field(default_factory=default_factory)
    if default is not NODEFAULT:
        return dataclasses.field(default=default)
    return dataclasses.field()


def struct_fields(cls: object) -> dict[str, dataclasses.Field[Any]] | None:
    """The fields of a Struct class or instance, or None for anything else."""
    target = cls if isinstance(cls, type) else type(cls)
    if not issubclass(target, Struct):
        return None
    found: dict[str, dataclasses.Field[Any]] = getattr(target, FIELDS_ATTR, None) or {}
    return found


def _fields(cls: object) -> tuple[FieldInfo, ...]:
    found = struct_fields(cls)
    if found is None:
        raise TypeError(f"{cls!r} is not a struct type")
    out = []
    for name, fld in found.items():
        default = NODEFAULT if fld.default is dataclasses.MISSING else fld.default
        factory = NODEFAULT if fld.default_factory is dataclasses.MISSING else fld.default_factory
        out.append(FieldInfo(name, name, fld.type, default, factory))
    return tuple(out)


def _asdict(obj: object) -> dict[str, Any]:
    found = struct_fields(obj)
    if found is None or isinstance(obj, type):
        raise TypeError("`struct` must be a `msgspec.Struct`")
    return {name: getattr(obj, name) for name in found}


structs = types.ModuleType("msgspec.structs")
structs.fields = _fields  # type: ignore[attr-defined]
structs.asdict = _asdict  # type: ignore[attr-defined]
structs.FieldInfo = FieldInfo  # type: ignore[attr-defined]
structs.NODEFAULT = NODEFAULT  # type: ignore[attr-defined]


def defstruct_fields(spec: list[object]) -> tuple[dict[str, dataclasses.Field[Any]], dict[str, object]]:
    """`defstruct`'s field list (`name`, `(name, type)`, `(name, type, default)`) as fields and annotations."""
    fields: dict[str, dataclasses.Field[Any]] = {}
    annotations: dict[str, object] = {}
    for item in spec:
        if isinstance(item, str):
            name, kind, default = item, Any, NODEFAULT
        elif isinstance(item, tuple) and len(item) == 2:
            (name, kind), default = item, NODEFAULT
        elif isinstance(item, tuple) and len(item) == 3:
            name, kind, default = item
        else:
            raise TypeError(f"items in `fields` must be a str or a tuple of length 2 or 3, not {item!r}")
        if isinstance(default, dataclasses.Field):
            fld = default
        elif default is NODEFAULT:
            fld = dataclasses.field()
        else:
            fld = dataclasses.field(default=default)
        fld.name = name
        fld.type = kind
        fields[name] = fld
        annotations[name] = kind
    return fields, annotations


def module(interp: Interp) -> types.ModuleType:
    """The `msgspec` module the engine's code imports, its `defstruct` building interpreter classes."""

    def defstruct(
        name: str,
        fields: list[object],
        *,
        bases: tuple[type, ...] | None = None,
        module: str | None = None,
        namespace: dict[str, object] | None = None,
        **_options: object,
    ) -> type:
        from scripts.flagtables.modules import Scope

        ns: dict[str, Any] = dict(namespace or {})
        ns["__lanes_interp__"] = interp
        # The class keeps the namespace's methods and attributes; a lazy attribute is evaluated in the
        # scope of the class it was written in, as its methods' names are.
        ns["__lanes_methods__"] = dict(ns.get("__lanes_methods__") or {})
        ns["__lanes_lazy__"] = dict(ns.get("__lanes_lazy__") or {})
        if "__lanes_scope__" not in ns:
            main = interp.module(module) if module else None
            if main is None:
                raise TypeError(f"defstruct {name!r}: no namespace or module to evaluate it in")
            ns["__lanes_scope__"] = Scope(main, main.scope)
        ns["__qualname__"] = name
        if module:
            ns["__module__"] = module
        own, annotations = defstruct_fields(list(fields))
        made = StubMeta(name, (*(bases or ()), Struct) if bases else (Struct,), ns)
        inherited: dict[str, dataclasses.Field[Any]] = {}
        for base in reversed(made.__mro__[1:]):
            inherited.update(base.__dict__.get(FIELDS_ATTR) or {})
        type.__setattr__(made, FIELDS_ATTR, {**inherited, **own})
        type.__setattr__(made, "__annotations__", annotations)
        return made

    out = types.ModuleType("msgspec")
    out.Struct = Struct  # type: ignore[attr-defined]
    out.NODEFAULT = NODEFAULT  # type: ignore[attr-defined]
    out.field = field  # type: ignore[attr-defined]
    out.defstruct = defstruct  # type: ignore[attr-defined]
    out.structs = structs  # type: ignore[attr-defined]
    return out
