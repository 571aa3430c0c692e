"""Functions and classes of the engine's source as interpreter values.

A class becomes a real class of metaclass `StubMeta` with the bases that can
be real (its own stubs, `dict`, exceptions; not ABCMeta or pydantic classes),
its methods as `Func`s and its other attributes evaluated on first use.
A dataclass (`@dataclass`, pydantic's, or a decorator that applies one, like
vLLM's `@config`) also gets real `dataclasses.Field`s and `__annotations__`
built from its annotated fields, so `dataclasses.fields()` and
`typing.get_type_hints(cls, include_extras=True)` answer as they would at
run time. Enums become real enums with their members.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import typing
from typing import TYPE_CHECKING, Any

from scripts.flagtables import msgspec_standin
from scripts.flagtables.values import EngineError, Func, Indeterminate, StubMeta, Unknown

if TYPE_CHECKING:
    from scripts.flagtables.interp import Interp
    from scripts.flagtables.modules import Scope

_FIELD_MARK = getattr(dataclasses, "_FIELD")  # noqa: B009 - what dataclasses.fields() filters on
_KINDS = {"classmethod": "classmethod", "staticmethod": "staticmethod", "property": "property"}


def make_func(
    interp: Interp, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, scope: Scope, kind: str = "function"
) -> Func:
    from scripts.flagtables.evaluate import forgiving

    spec = node.args
    defaults = [forgiving(interp, d, scope) for d in spec.defaults]
    kw_defaults = {
        p.arg: forgiving(interp, d, scope)
        for p, d in zip(spec.kwonlyargs, spec.kw_defaults, strict=True)
        if d is not None
    }
    name = node.name if not isinstance(node, ast.Lambda) else "<lambda>"
    return Func(
        name=name, node=node, module=scope.module, scope=scope, defaults=defaults, kw_defaults=kw_defaults, kind=kind
    )


def _decorator_names(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> list[str]:
    names = []
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        names.append(ast.unparse(target))
    return names


def make_class(interp: Interp, node: ast.ClassDef, scope: Scope) -> object:
    from scripts.flagtables.evaluate import forgiving
    from scripts.flagtables.modules import Scope as ScopeClass

    bases = [forgiving(interp, b, scope) for b in node.bases]
    real = [b for b in bases if isinstance(b, type)]
    if any(issubclass(b, enum.Enum) for b in real):
        return interp.make_enum(node, scope, real)
    usable = tuple(b for b in real if type(b) in (type, StubMeta))
    methods: dict[str, Func] = {}
    lazy: dict[str, ast.stmt] = {}
    body_scope = ScopeClass(scope.module, scope)
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            decorators = _decorator_names(stmt)
            if any(d.endswith(("overload", ".setter", ".deleter")) for d in decorators):
                continue
            kind = next(
                (_KINDS[d.rsplit(".", 1)[-1]] for d in decorators if d.rsplit(".", 1)[-1] in _KINDS), "function"
            )
            if any(d.endswith("cached_property") for d in decorators):
                kind = "property"
            # A method's free names resolve around the class, never in its body (Python's scoping).
            methods[stmt.name] = make_func(interp, stmt, scope, kind)
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    lazy[target.id] = stmt
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            lazy[stmt.target.id] = stmt
        elif isinstance(stmt, ast.ClassDef):
            lazy[stmt.name] = stmt
    namespace: dict[str, Any] = {
        "__lanes_interp__": interp,
        "__lanes_methods__": methods,
        "__lanes_lazy__": lazy,
        "__lanes_scope__": body_scope,
        "__module__": scope.module.name,
        "__qualname__": node.name,
        "__doc__": ast.get_docstring(node),
    }
    try:
        cls: type = StubMeta(node.name, usable or (object,), namespace)
    except TypeError:
        cls = StubMeta(node.name, (object,), namespace)
    body_scope.klass = cls
    for func in methods.values():
        func.owner = cls
    if _is_dataclass(interp, node, scope):
        _dataclass_fields(interp, cls, node, body_scope)
    elif issubclass(cls, msgspec_standin.Struct):
        _dataclass_fields(interp, cls, node, body_scope, msgspec_standin.FIELDS_ATTR)
    return cls


def _is_dataclass(interp: Interp, node: ast.ClassDef, scope: Scope) -> bool:
    from scripts.flagtables.evaluate import forgiving

    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if ast.unparse(target).rsplit(".", 1)[-1] == "dataclass":
            return True
        value = forgiving(interp, target, scope)
        if value is dataclasses.dataclass:
            return True
        # A decorator of the engine's own that applies a dataclass (vLLM's `@config` calls pydantic's).
        if isinstance(value, Func) and any(
            (isinstance(n, ast.Name) and n.id == "dataclass")
            or (isinstance(n, ast.Attribute) and n.attr == "dataclass")
            for n in ast.walk(value.node)
        ):
            return True
    return False


def _is_classvar(annotation: object, text: str) -> bool:
    if typing.get_origin(annotation) is typing.ClassVar or annotation is typing.ClassVar:
        return True
    return text.split("[", 1)[0].rsplit(".", 1)[-1] in ("ClassVar", "InitVar", "KW_ONLY")


def _dataclass_fields(
    interp: Interp, cls: type, node: ast.ClassDef, body_scope: Scope, attr: str = "__dataclass_fields__"
) -> None:
    """A dataclass's fields (in `__dataclass_fields__`), or a msgspec Struct's (in `attr`), bases' first."""
    from scripts.flagtables.evaluate import eval_expr, forgiving

    fields: dict[str, dataclasses.Field[Any]] = {}
    for base in reversed(cls.__mro__[1:]):
        fields.update(base.__dict__.get(attr) or {})
    annotations: dict[str, object] = {}
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        name = stmt.target.id
        try:
            annotation = eval_expr(interp, stmt.annotation, body_scope, annotation=True)
        except (Indeterminate, EngineError) as exc:
            annotation = Unknown(f"annotation of {node.name}.{name} ({exc})")
        annotations[name] = annotation
        if _is_classvar(annotation, ast.unparse(stmt.annotation)):
            continue
        default = forgiving(interp, stmt.value, body_scope) if stmt.value is not None else dataclasses.MISSING
        if isinstance(default, dataclasses.Field):
            fld = default
        elif default is dataclasses.MISSING:
            fld = dataclasses.field()
        else:
            fld = dataclasses.field(default=default)  # type: ignore[arg-type]
        fld.name = name
        fld.type = annotation
        fld._field_type = _FIELD_MARK  # type: ignore[attr-defined]
        fields[name] = fld
    type.__setattr__(cls, "__annotations__", annotations)
    type.__setattr__(cls, attr, fields)


def class_lazy(interp: Interp, klass: type, name: str) -> object:
    """A class attribute evaluated on first use (then kept on the class)."""
    from scripts.flagtables.evaluate import eval_expr

    ns = klass.__dict__
    stmt = ns["__lanes_lazy__"].pop(name)
    scope: Scope = ns["__lanes_scope__"]
    try:
        if isinstance(stmt, ast.ClassDef):
            value: object = make_class(interp, stmt, scope)
        else:
            assert isinstance(stmt, ast.Assign | ast.AnnAssign)
            assert stmt.value is not None
            value = eval_expr(interp, stmt.value, scope)
    except (Indeterminate, EngineError) as exc:
        value = Unknown(f"{klass.__qualname__}.{name} ({exc})")
    if isinstance(value, dataclasses.Field):
        # As in a real dataclass: the class keeps a field's plain default, not the Field.
        if value.default is dataclasses.MISSING:
            raise EngineError(AttributeError(f"type object {klass.__qualname__!r} has no attribute {name!r}"))
        value = value.default
    scope.vars[name] = value
    type.__setattr__(klass, name, value)
    return value
