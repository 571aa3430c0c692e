"""The values the static reader works with, besides plain Python data.

An engine's flag registration is ordinary Python: dataclass fields with type
hints, helper functions, `parser.add_argument(...)` calls. The reader walks
that source (never importing it) and evaluates it with these stand-ins:

- `Unknown`: what a file cannot tell (a third-party object, an environment
  variable, the current platform). Any use of it is Unknown again; a branch
  that depends on it raises `Indeterminate`.
- `Func`/`Bound`: a function of the engine's source, run by the interpreter
  when called (also from real stdlib code: `sorted(key=...)`, `next(...)`).
- Classes of the engine's source become real classes of metaclass `StubMeta`,
  so `typing.Literal[...]`, `X | None`, `dataclasses.fields()`,
  `typing.get_type_hints()` and `isinstance` keep their real semantics.
"""

from __future__ import annotations

import ast
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scripts.flagtables.interp import Interp
    from scripts.flagtables.modules import Module, Scope


class Unknown:
    """A value the source alone does not determine."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why

    def __repr__(self) -> str:
        return f"<unknown: {self.why}>"

    # Callable and `|`-able so that typing accepts it where a class was expected
    # (`Optional[torch.Tensor]` reads as Optional[<unknown>], as the engine's own
    # derivation would see a third-party class).
    def __call__(self, *args: object, **kwargs: object) -> Unknown:
        return Unknown(f"{self.why}()")

    def __or__(self, other: object) -> object:
        return typing.Union[self, other]  # noqa: UP007 - builds the typing object at run time

    def __ror__(self, other: object) -> object:
        return typing.Union[other, self]  # noqa: UP007

    def __deepcopy__(self, memo: dict[int, object]) -> Unknown:
        return self


class Foreign(Unknown):
    """An object of a package outside the wheel (torch.dtype, pydantic.BaseModel): its value is not known,
    but it is one definite object, so identity and equality with anything else are False, it is true,
    and its module is not `builtins` (how the engines' own derivation tells a third-party class)."""

    __slots__ = ()


class Indeterminate(Exception):  # noqa: N818 - a condition, not a failure of the engine
    """A branch or a loop depends on an Unknown value."""


class EngineError(Exception):
    """The engine's own code raised (a `raise` statement, or a builtin it called)."""

    def __init__(self, value: object) -> None:
        super().__init__(repr(value))
        self.value = value


class ControlFlow(Exception):  # noqa: N818 - return/break/continue, not errors
    pass


class ReturnFlow(ControlFlow):
    def __init__(self, value: object) -> None:
        super().__init__()
        self.value = value


class BreakFlow(ControlFlow):
    pass


class ContinueFlow(ControlFlow):
    pass


FuncNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda


@dataclass(eq=False)
class Func:
    """A function of the engine's source; calling it interprets its body."""

    name: str
    node: FuncNode
    module: Module
    scope: Scope | None
    defaults: list[object] = field(default_factory=list)
    kw_defaults: dict[str, object] = field(default_factory=dict)
    owner: type | None = None
    kind: str = "function"  # function | classmethod | staticmethod | property

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self.module.interp.call(self, list(args), dict(kwargs))

    def __deepcopy__(self, memo: dict[int, object]) -> Func:
        return self

    def __repr__(self) -> str:
        return f"<func {self.module.name}.{self.name}>"

    def closure_value(self, name: str) -> object:
        """A variable of the scope the function was defined in (how a wrapper's wrapped type is read)."""
        scope = self.scope
        while scope is not None:
            if name in scope.vars:
                return scope.vars[name]
            scope = scope.parent
        return Unknown(name)


@dataclass(eq=False)
class Bound:
    """A method bound to an instance or, for a classmethod, to its class."""

    func: Func
    target: object

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self.func.module.interp.call(self, list(args), dict(kwargs))

    def __deepcopy__(self, memo: dict[int, object]) -> Bound:
        return self


@dataclass(eq=False)
class SuperProxy:
    """`super()` inside a method: attribute lookup after `owner` in the target's MRO."""

    owner: type
    target: object


class StubMeta(type):
    """Metaclass of the engine's classes: calling one runs the interpreter's constructor."""

    def __call__(cls, *args: object, **kwargs: object) -> object:
        interp: Interp = cls.__dict__["__lanes_interp__"]
        return interp.instantiate(cls, list(args), kwargs)


class FieldInfoStub:
    """pydantic's `Field(...)`: only `default` and `default_factory` matter to flag derivation."""

    def __init__(self, default: object = None, *, default_factory: object = None, **_: object) -> None:
        self.default = default
        self.default_factory = default_factory


class SkipValidation:
    """pydantic's `SkipValidation[X]`, which is `Annotated[X, SkipValidation()]`: the hint stays X."""

    def __class_getitem__(cls, item: object) -> object:
        return typing.Annotated[item, cls]


def pydantic_field(*args: object, **kwargs: object) -> FieldInfoStub:
    default = args[0] if args else kwargs.pop("default", None)
    return FieldInfoStub(default, default_factory=kwargs.pop("default_factory", None))


class Recorder:
    """A stand-in for the engine's argparse parser: a function that receives one is a flag registration,
    and the interpreter skips what it cannot evaluate there (noting it) instead of giving up."""


def contains_unknown(values: object) -> bool:
    """Whether a value (or one level of its items) is Unknown."""
    if isinstance(values, Unknown):
        return True
    if isinstance(values, list | tuple | set | frozenset):
        return any(isinstance(v, Unknown) for v in values)
    if isinstance(values, dict):
        return any(isinstance(v, Unknown) for v in (*values.keys(), *values.values()))
    return False


def truth(value: object) -> bool:
    if isinstance(value, Unknown) and not isinstance(value, Foreign):
        raise Indeterminate(f"the truth of {value!r}")
    return bool(value)


def describe(value: Any) -> str:
    """A short name for a value, for the notes a table keeps."""
    if isinstance(value, Func):
        return f"{value.module.name}.{value.name}"
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return repr(value)[:80]
