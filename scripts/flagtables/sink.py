"""The parser the engine's registration code is handed, and what its calls become in a table.

Each `add_argument(...)` is recorded with the interpreter's values, then
turned into an entry the way argparse would read the same call: option
strings (with the `--no-*` forms `argparse.BooleanOptionalAction` adds),
how many values it takes (`nargs`, or 0 for store_true-like actions and
custom actions whose constructor defaults `nargs=0`), the value type as a
tag, the choices, whether it is required, and where in the source it was
registered.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scripts.flagtables.values import Func, Recorder, StubMeta, Unknown, describe

if TYPE_CHECKING:
    from scripts.flagtables.interp import Interp

_NO_VALUE = {"store_true", "store_false", "store_const", "append_const", "count", "help", "version"}
_NO_VALUE_CLASSES = tuple(
    getattr(argparse, name)
    for name in ("_StoreTrueAction", "_StoreFalseAction", "_StoreConstAction", "_CountAction", "_HelpAction")
)
JsonChoice = str | int | float | bool | None


@dataclass
class Registration:
    args: tuple[object, ...]
    kwargs: dict[str, object]
    where: str
    spread: object = None
    """An Unknown that `**kwargs` expanded (the call's settings are then partly unknown)."""


@dataclass
class Sink(Recorder):
    """What `parser`, its argument groups and a subparser are, to the engine's code."""

    interp: Interp
    registrations: list[Registration] = field(default_factory=list)
    parser_kwargs: dict[str, object] = field(default_factory=dict)
    subparsers: list[tuple[str, dict[str, object]]] = field(default_factory=list)

    def add_argument(self, *args: object, **kwargs: object) -> object:
        spread = kwargs.pop("**", None)
        path, line = self.interp.loc
        self.registrations.append(Registration(args, kwargs, f"{path}:{line}", spread))
        return Unknown("an argparse action")

    def add_argument_group(self, *args: object, **kwargs: object) -> Sink:
        return self

    def add_mutually_exclusive_group(self, *args: object, **kwargs: object) -> Sink:
        return self

    def add_subparsers(self, *args: object, **kwargs: object) -> Sink:
        return self

    def add_parser(self, name: str, **kwargs: object) -> Sink:
        """A subcommand (`vllm serve`): its arguments are recorded on this same sink."""
        self.subparsers.append((name, kwargs))
        return self

    def set_defaults(self, **kwargs: object) -> None:
        return None

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        return Unknown(f"parser.{name}")

    def __deepcopy__(self, memo: dict[int, object]) -> Sink:
        return self


def type_tag(value: object) -> str:
    """The value type, as a tag `reconciler.engines.flags` knows how to check (or `custom:` if it cannot)."""
    if value is None or value is str:
        return "str"
    if value is int:
        return "int"
    if value is float:
        return "float"
    if value is json.loads:
        return "json"
    if isinstance(value, Func):
        # vLLM's arg_utils wraps a converter: optional_type(T) -> _optional_type ('' and 'None' are None),
        # parse_type(T) -> _parse_type (a ValueError becomes an ArgumentTypeError naming T).
        if value.name == "_optional_type":
            return "optional:" + type_tag(value.closure_value("return_type"))
        if value.name == "_parse_type":
            return "parsed:" + type_tag(value.closure_value("return_type"))
        return f"custom:{value.module.name}.{value.name}"
    return f"custom:{describe(value)}"


def _choices(value: object) -> list[JsonChoice] | None:
    if isinstance(value, dict):
        value = list(value)
    if isinstance(value, set | frozenset):
        value = sorted(value, key=str)
    if not isinstance(value, list | tuple):
        raise ValueError(f"choices {value!r}")
    out: list[JsonChoice] = []
    for item in value:
        if not isinstance(item, str | int | float | bool | type(None)):
            raise ValueError(f"choice {item!r}")
        out.append(item)
    return out


def _action_nargs(action: type, interp: Interp) -> object:
    """The `nargs` a custom Action class passes to argparse when the call gives none."""
    if issubclass(action, _NO_VALUE_CLASSES):
        return 0
    for klass in action.__mro__:
        if isinstance(klass, StubMeta):
            init = klass.__dict__["__lanes_methods__"].get("__init__")
            if init is None:
                continue
            params = [p.arg for p in (*init.node.args.posonlyargs, *init.node.args.args)]
            defaults = dict(zip(params[len(params) - len(init.defaults) :], init.defaults, strict=True))
            defaults.update(init.kw_defaults)
            return defaults.get("nargs")
    return None


def _refusal(action: type, kwargs: dict[str, object]) -> str | None:
    """A deprecated flag whose action calls `parser.error(self.error_message)` when it is used (SGLang)."""
    message = kwargs.get("error_message")
    if not isinstance(message, str):
        return None
    for klass in action.__mro__:
        if isinstance(klass, StubMeta):
            call = klass.__dict__["__lanes_methods__"].get("__call__")
            if call is not None and "parser.error(self.error_message)" in _source(call):
                return message
    return None


def _source(func: Func) -> str:
    import ast

    return ast.unparse(func.node)


def to_entries(sink: Sink) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """(flags, positionals, notes) of everything the sink recorded, in registration order."""
    flags: list[dict[str, Any]] = []
    positionals: list[dict[str, Any]] = []
    notes: list[str] = []
    seen: set[str] = set()
    for reg in sink.registrations:
        names = [n for n in reg.args if isinstance(n, str)]
        if len(names) != len(reg.args) or not names:
            notes.append(f"{reg.where}: an argument whose name is not known ({reg.args!r}) was left out")
            continue
        kw = reg.kwargs
        action = kw.get("action")
        nargs = kw.get("nargs")
        entry: dict[str, Any] = {}
        refused = None
        if action in _NO_VALUE:
            nargs = 0
        elif action is argparse.BooleanOptionalAction:
            nargs = 0
            names += [f"--no-{n[2:]}" for n in names if n.startswith("--")]
        elif isinstance(action, type) and issubclass(action, argparse.Action):
            if "nargs" not in kw:
                nargs = _action_nargs(action, sink.interp)
            refused = _refusal(action, kw)
        elif action not in (None, "store", "append", "extend"):
            notes.append(f"{reg.where}: {names[0]}: action {describe(action)} not known; it may take a value or not")
            nargs = "?"
        if reg.spread is not None:
            notes.append(f"{reg.where}: {names[0]}: some settings come from an unknown value ({reg.spread!r})")
        if isinstance(nargs, Unknown) or not isinstance(nargs, int | str | type(None)):
            notes.append(f"{reg.where}: {names[0]}: nargs {nargs!r} not known; taken as '?'")
            nargs = "?"
        entry["flags"] = names
        entry["nargs"] = nargs
        if nargs != 0:
            entry["type"] = type_tag(kw.get("type"))
            if kw.get("choices") is not None:
                try:
                    entry["choices"] = _choices(kw["choices"])
                except ValueError as exc:
                    notes.append(f"{reg.where}: {names[0]}: choices not known ({exc}); any value is taken")
        if kw.get("required") is True:
            entry["required"] = True
        if refused is not None:
            entry["refused"] = refused
        entry["source"] = reg.where
        if not names[0].startswith("-"):
            positionals.append({"name": names[0], "nargs": nargs, "source": reg.where})
            continue
        clash = [n for n in names if n in seen]
        if clash:
            notes.append(f"{reg.where}: {', '.join(clash)} registered twice; the first registration is kept")
            continue
        seen.update(names)
        flags.append(entry)
    return flags, positionals, notes
