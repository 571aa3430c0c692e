"""The interpreter's state: modules read lazily from a wheel, scopes, calls, classes, attributes.

Nothing of the engine is imported or executed by Python: its modules are
parsed with `ast`, a module-level name is evaluated only when something
needs it (running exactly the top-level statements that bind or extend it),
and calls run the called function's AST. Imports of the engine's own modules
resolve inside the wheel; a small list of pure standard-library modules
(typing, dataclasses, argparse, json, ...) are the real ones, so type hints
and argparse constants keep their real meaning; everything else (torch,
pydantic, os, environment variables, the platform) is `Unknown`.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import enum
import importlib
import sys
import types
import typing
from typing import Any

from scripts.flagtables import evaluate, msgspec_standin, statements
from scripts.flagtables.modules import Module, Scope
from scripts.flagtables.values import (
    Bound,
    EngineError,
    FieldInfoStub,
    Foreign,
    Func,
    Indeterminate,
    Recorder,
    ReturnFlow,
    SkipValidation,
    StubMeta,
    SuperProxy,
    Unknown,
    contains_unknown,
    describe,
    pydantic_field,
)
from scripts.flagtables.wheel import Wheel

# Pure modules whose real objects stand for themselves (no I/O, no process state).
REAL_STDLIB = frozenset(
    {
        "abc", "argparse", "collections", "collections.abc", "copy", "dataclasses", "enum", "functools",
        "itertools", "json", "math", "numbers", "operator", "re", "ssl", "string", "textwrap", "types", "typing",
    }
)  # fmt: skip
# pydantic's Field/FieldInfo carry a dataclass field's default; the rest of pydantic is Unknown.
OVERRIDES: dict[tuple[str, str], object] = {
    ("pydantic", "Field"): pydantic_field,
    ("pydantic.fields", "Field"): pydantic_field,
    ("pydantic.fields", "FieldInfo"): FieldInfoStub,
    ("pydantic", "FieldInfo"): FieldInfoStub,
    ("pydantic", "SkipValidation"): SkipValidation,
    ("pydantic.functional_validators", "SkipValidation"): SkipValidation,
}
# Third-party modules the flag registration is built on, modelled in pure Python (a C extension cannot
# stand for itself here: its classes cannot take the interpreter's).
STANDINS = frozenset({"msgspec", "msgspec.structs"})
MAX_DEPTH = 120


class Interp:
    """Evaluates an engine's flag registration from its wheel."""

    def __init__(self, wheel: Wheel, argv: list[str]) -> None:
        self.wheel = wheel
        self.modules: dict[str, Module | None] = {}
        self.notes: list[str] = []
        self.loc: tuple[str, int] = ("", 0)
        self.depth = 0
        self.steps = 0
        # What `sys` answers: the command line of a normal start, no --help, nothing imported.
        self.sys = types.SimpleNamespace(
            argv=list(argv), version_info=sys.version_info, modules={}, platform="linux", maxsize=sys.maxsize
        )
        self.msgspec = msgspec_standin.module(self)

    def note(self, message: str) -> None:
        if message not in self.notes:
            self.notes.append(message)

    # -- modules ----------------------------------------------------------------

    def module(self, name: str) -> Module | None:
        if name not in self.modules:
            source = self.wheel.module(name)
            self.modules[name] = None
            if source is not None:
                tree = ast.parse(source.text, filename=source.path)
                self.modules[name] = Module(self, name, source.path, tree, source.is_package)
        return self.modules[name]

    def resolve_relative(self, module: Module, target: str | None, level: int) -> str:
        if level == 0:
            return target or ""
        parts = module.name.split(".")
        base = parts if module.is_package else parts[:-1]
        base = base[: len(base) - (level - 1)]
        return ".".join(base + ([target] if target else []))

    def import_module(self, name: str) -> object:
        found = self.module(name)
        if found is not None:
            return found
        if name == "sys":
            return self.sys
        if name in REAL_STDLIB:
            return importlib.import_module(name)
        if name == "typing_extensions":
            return typing
        if name == "msgspec":
            return self.msgspec
        if name == "msgspec.structs":
            return msgspec_standin.structs
        return Foreign(name)

    def import_from(self, module_name: str, attr: str) -> object:
        if (module_name, attr) in OVERRIDES:
            return OVERRIDES[(module_name, attr)]
        module = self.import_module(module_name)
        if isinstance(module, Module):
            try:
                return module.lookup(attr)
            except LookupError:
                sub = self.module(f"{module_name}.{attr}")
                return sub if sub is not None else Unknown(f"{module_name}.{attr}")
        if isinstance(module, Unknown):
            return Foreign(f"{module_name}.{attr}")
        return getattr(module, attr, Unknown(f"{module_name}.{attr}"))

    # -- calls ------------------------------------------------------------------

    def call(self, fn: object, args: list[object], kwargs: dict[str, object]) -> object:
        spread = kwargs.pop("**", None)
        if callable(fn) and (isinstance(fn, Recorder) or isinstance(getattr(fn, "__self__", None), Recorder)):
            return fn(*args, **kwargs, **({"**": spread} if spread is not None else {}))
        if isinstance(fn, Func):
            return self.invoke(fn, args, kwargs)
        if isinstance(fn, Bound):
            return self.invoke(fn.func, [fn.target, *args], kwargs)
        if isinstance(fn, StubMeta):
            return self.instantiate(fn, args, kwargs)
        if isinstance(fn, Unknown) or not callable(fn):
            return Unknown(f"{describe(fn)}(...)")
        try:
            return fn(*args, **kwargs)
        except (Indeterminate, EngineError, ReturnFlow):
            raise
        except Exception as exc:
            if any(contains_unknown(v) for v in (*args, *kwargs.values())):
                return Unknown(f"{describe(fn)}(...)")
            raise EngineError(exc) from None

    def invoke(self, func: Func, args: list[object], kwargs: dict[str, object]) -> object:
        if self.depth > MAX_DEPTH:
            raise Indeterminate(f"call depth at {func.name}")
        scope = Scope(func.module, func.scope)
        statements.bind_params(self, func, args, dict(kwargs), scope)
        scope.owner = func.owner
        scope.first = args[0] if args else None
        scope.forgiving = any(isinstance(v, Recorder) for v in scope.vars.values())
        generator = evaluate.is_generator(func.node)
        if generator:
            scope.yields = []
        saved = self.loc
        self.depth += 1
        try:
            if isinstance(func.node, ast.Lambda):
                return evaluate.eval_expr(self, func.node.body, scope)
            statements.exec_block(self, func.node.body, scope)
        except ReturnFlow as flow:
            if not generator:
                return flow.value
        finally:
            self.depth -= 1
            self.loc = saved
        return iter(scope.yields or []) if generator else None

    def instantiate(self, cls: type, args: list[object], kwargs: dict[str, object]) -> object:
        real = next((k for k in cls.__mro__ if not isinstance(k, StubMeta) and k is not object), None)
        obj: Any = real.__new__(cls) if real is not None else object.__new__(cls)  # type: ignore[call-overload]
        init = self._stub_method(cls, "__init__")
        if init is not None:
            self.invoke(init, [obj, *args], kwargs)
        elif getattr(cls, "__dataclass_fields__", None) is not None or msgspec_standin.struct_fields(cls):
            self._init_fields(cls, obj, args, kwargs)
        elif real is not None:
            # A base's constructor that refuses stand-in values leaves a bare instance.
            with contextlib.suppress(Exception):
                real.__init__(obj, *args, **kwargs)  # type: ignore[misc]
        return obj

    def _init_fields(self, cls: type, obj: object, args: list[object], kwargs: dict[str, object]) -> None:
        fields: dict[str, dataclasses.Field[Any]] = (
            getattr(cls, "__dataclass_fields__", None) or msgspec_standin.struct_fields(cls) or {}
        )
        for index, (name, fld) in enumerate(fields.items()):
            if index < len(args):
                value = args[index]
            elif name in kwargs:
                value = kwargs[name]
            elif fld.default is not dataclasses.MISSING:
                value = fld.default
            elif fld.default_factory is not dataclasses.MISSING:
                value = self.call(fld.default_factory, [], {})
            else:
                value = Unknown(f"{cls.__qualname__}.{name}")
            object.__setattr__(obj, name, value)

    def _stub_method(self, cls: type, name: str) -> Func | None:
        for klass in cls.__mro__:
            if isinstance(klass, StubMeta):
                methods = klass.__dict__["__lanes_methods__"]
                if name in methods:
                    found: Func = methods[name]
                    return found
            elif name in klass.__dict__ and klass is not object:
                return None
        return None

    # -- attributes ---------------------------------------------------------------

    def getattr(self, obj: object, name: str) -> object:
        if isinstance(obj, Unknown):
            # An Unknown that stands for a third-party class still has a name and is not a builtin.
            if name == "__module__":
                return "<not read>"
            if name in ("__name__", "__qualname__"):
                return obj.why
            return (Foreign if isinstance(obj, Foreign) else Unknown)(f"{obj.why}.{name}")
        if isinstance(obj, Module):
            try:
                return obj.lookup(name)
            except LookupError:
                return Unknown(f"{obj.name}.{name}")
        if isinstance(obj, SuperProxy):
            return self._super_attr(obj, name)
        if isinstance(obj, Func | Bound):
            func = obj if isinstance(obj, Func) else obj.func
            return func.name if name in ("__name__", "__qualname__") else Unknown(f"{func.name}.{name}")
        if isinstance(obj, StubMeta):
            if name.startswith("__") and hasattr(obj, name):
                return getattr(obj, name)
            return self._bind(self.class_attr(obj, name), None, obj)
        if isinstance(type(obj), StubMeta):
            if name in getattr(obj, "__dict__", {}):
                return obj.__dict__[name]
            if name.startswith("__") and hasattr(obj, name):
                return getattr(obj, name)
            return self._bind(self.class_attr(type(obj), name), obj, type(obj))
        if isinstance(obj, types.ModuleType) and obj.__name__ not in REAL_STDLIB | STANDINS:
            return Foreign(f"{obj.__name__}.{name}")
        try:
            return getattr(obj, name)
        except AttributeError as exc:
            raise EngineError(exc) from None

    def _bind(self, raw: object, instance: object, cls: type) -> object:
        if not isinstance(raw, Func):
            return raw
        if raw.kind == "classmethod":
            return Bound(raw, cls)
        if raw.kind == "staticmethod":
            return raw
        if raw.kind == "property":
            return self.invoke(raw, [instance], {}) if instance is not None else raw
        return Bound(raw, instance) if instance is not None else raw

    def class_attr(self, cls: type, name: str) -> object:
        for klass in cls.__mro__:
            if isinstance(klass, StubMeta):
                ns = klass.__dict__
                if name in ns["__lanes_methods__"]:
                    return ns["__lanes_methods__"][name]
                if name in ns["__lanes_lazy__"]:
                    return evaluate.class_lazy(self, klass, name)
                if name in ns:
                    return ns[name]
            elif name in klass.__dict__ or (klass is not object and hasattr(klass, name)):
                return getattr(cls, name)
        raise EngineError(AttributeError(f"type object {cls.__qualname__!r} has no attribute {name!r}"))

    def _super_attr(self, proxy: SuperProxy, name: str) -> object:
        target = proxy.target
        cls = target if isinstance(target, type) else type(target)
        mro = cls.__mro__
        after = mro[mro.index(proxy.owner) + 1 :] if proxy.owner in mro else mro[1:]
        for klass in after:
            if isinstance(klass, StubMeta):
                ns = klass.__dict__
                if name in ns["__lanes_methods__"]:
                    instance = None if isinstance(target, type) else target
                    return self._bind(ns["__lanes_methods__"][name], instance, cls)
            elif name in klass.__dict__:
                raw = klass.__dict__[name]
                return (
                    raw.__get__(None if isinstance(target, type) else target, cls) if hasattr(raw, "__get__") else raw
                )
        return Unknown(f"super().{name}")

    def setattr(self, obj: object, name: str, value: object) -> None:
        if isinstance(obj, Module):
            obj.values[name] = value
        elif isinstance(obj, StubMeta) or isinstance(type(obj), StubMeta):
            object.__setattr__(obj, name, value) if not isinstance(obj, type) else type.__setattr__(obj, name, value)
        elif isinstance(obj, types.SimpleNamespace) and obj is not self.sys:
            setattr(obj, name, value)
        # Real stdlib objects and Unknowns are never changed by the engine's code.

    def make_enum(self, node: ast.ClassDef, scope: Scope, bases: list[type]) -> object:
        members: list[tuple[str, object]] = []
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                key = stmt.targets[0].id
                if key.startswith("_"):
                    continue
                try:
                    value = evaluate.eval_expr(self, stmt.value, scope)
                except (Indeterminate, EngineError):
                    value = key
                members.append((key, key if isinstance(value, Unknown | enum.auto) else value))
        enum_base = next(b for b in bases if issubclass(b, enum.Enum))
        mixin = next((b for b in bases if b in (str, int)), None)
        try:
            build: Any = enum_base  # the functional API: Enum(name, members, module=..., type=...)
            made: object = build(node.name, members, module=scope.module.name, type=mixin)
        except Exception as exc:
            self.note(f"{scope.module.path}:{node.lineno}: enum {node.name} not built ({exc})")
            return Unknown(node.name)
        return made
