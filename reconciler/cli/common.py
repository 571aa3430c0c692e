"""What every command shares: loading a commit, exit codes, error printing.

Exit codes are the contract scripts rely on; `reconciler.cli.exitcodes` lists them all. With
`--json` every outcome is one JSON object on stdout, an error too: `{"ok": false, "error": ...,
"exit_code": N}` (with `file`, `line` and `field` when bad input says where); progress, warnings
and other diagnostics for people go to stderr.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar

import typer

from reconciler.cli import exitcodes
from reconciler.errors import InputError, LanesError
from reconciler.source.loadcommit import LoadedCommit, load_commit

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["LoadedCommit", "load_commit"]

EXIT_OK = exitcodes.OK
EXIT_DENY = exitcodes.FAILED
EXIT_INPUT = exitcodes.BAD_INPUT

P = ParamSpec("P")
R = TypeVar("R")


@functools.cache
def err_console() -> Console:
    """stderr for people, made on first use: rich is 61 modules and about 3 MB, which the daemon (whose
    output is JSON lines) and `lanes check` on the happy path never need."""
    from rich.console import Console

    return Console(stderr=True)


def json_text(value: Any, depth: int = 2, _level: int = 0) -> str:
    """`value` as JSON indented by two spaces down to `depth` levels, each value below on one line.

    A big answer (`lanes check --json` at 1,000 lanes: 5.6 MB) encoded with `indent` goes through json's
    pure-Python encoder, 0.11 s; values below `depth` go through its C encoder, and the whole takes 0.03 s.
    The value is the same JSON; a script parses it as before and a person still reads one finding a line."""
    if _level >= depth or not isinstance(value, dict | list) or not value:
        return json.dumps(value)
    pad, inner = "  " * _level, "  " * (_level + 1)
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(str(k))}: {json_text(v, depth, _level + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    items = [f"{inner}{json_text(v, depth, _level + 1)}" for v in value]
    return "[\n" + ",\n".join(items) + f"\n{pad}]"


def error_json(message: str, code: int, **extra: Any) -> dict[str, Any]:
    """The one JSON error shape of every `--json` command."""
    return {"ok": False, "error": message, "exit_code": code, **extra}


def fail(message: str, code: int = EXIT_INPUT, *, as_json: bool = False, **extra: Any) -> NoReturn:
    if as_json:
        print(json.dumps(error_json(message, code, **extra)))
    else:
        from rich.markup import escape

        err_console().print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def handle_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn our errors into a one-line message and an exit code, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        as_json = bool(kwargs.get("as_json", False))
        try:
            return func(*args, **kwargs)
        except InputError as exc:
            fail(exc.describe(), EXIT_INPUT, as_json=as_json, file=exc.file, line=exc.line, field=exc.field)
        except LanesError as exc:
            fail(str(exc), EXIT_DENY, as_json=as_json)
        except KeyboardInterrupt:
            err_console().print("interrupted")
            sys.exit(exitcodes.INTERRUPTED)

    return wrapper


def gib(value: float) -> str:
    return f"{value / (1 << 30):.1f}"
